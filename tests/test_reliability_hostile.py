"""Hostile 2026-07-28 rounds through the SDK's real client: nothing forged is accepted.

A client drives the rounds of a call by hand and sends whatever hypothesis draws:
arbitrary, truncated, tampered, replayed, cross-tool, cross-argument and cross-session
``request_state`` tokens; ``input_responses`` for questions that were never asked, of the
wrong kind (a sampling result for an elicitation), schema-violating, oversized or full of
unicode edge cases. Some tokens are *forged*: the test holds the server's sealing key and
seals an arbitrary inner state, as if the SDK's integrity layer were broken, so
resolvent's own decoding sees hostile state too.

For every input the server answers with one of: a re-ask of real questions, an
``isError`` result that does not echo the client's content, the SDK's -32602 for a state
it cannot verify, or a result whose every injected value the resolver produced or the
client answered to that exact question (as pinned by the state the answer came with).
And the server keeps answering. 60 inputs per backend by default; ``RESOLVENT_LOAD=full`` tries 800.
"""

import json
from collections import Counter
from collections.abc import Iterator
from typing import Annotated, Any

import mcp_types as types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.client import ClientRequestContext
from mcp.server.mcpserver import MCPServer, RequestStateSecurity
from mcp.server.request_state import AESGCMRequestStateCodec, InvalidRequestState
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from mcp_helpers import client, text
from reliability_figures import load_size, record
from resolvent import Accepted, Container, Elicit, ElicitationResult, Resolve
from resolvent.mcp import Sample, inject

pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")

KEY = bytes(range(32))
CODEC = AESGCMRequestStateCodec([KEY])
MODE = "2026-07-28"
HONEST_NAME = "Ada"


class Name(BaseModel):
    name: str


class City(BaseModel):
    city: str


async def role() -> str:
    """A resolver that asks nothing: no client input may ever replace its value."""
    return "user"


async def ask_name(topic: str) -> Elicit[Name]:
    return Elicit(f"Name for {topic}?", Name)


async def ask_city(name: Annotated[Name, Resolve(ask_name)]) -> Elicit[City]:
    return Elicit(f"City of {name.name}?", City)


async def sample(topic: str) -> Sample:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=topic))
    return Sample([message], max_tokens=5)


def build() -> MCPServer:
    container = Container()
    server = MCPServer(
        "hostile",
        lifespan=container.lifespan,
        request_state_security=RequestStateSecurity(keys=[KEY]),
    )

    @server.tool()
    @inject(container)
    async def profile(
        topic: str,
        who: Annotated[str, Resolve(role)],
        name: Annotated[Name, Resolve(ask_name)],
        city: Annotated[ElicitationResult[City], Resolve(ask_city)],
    ) -> str:
        assert isinstance(name, Name) and isinstance(name.name, str)
        got = city.data.city if isinstance(city, Accepted) else city.action
        return json.dumps({"role": who, "name": name.name, "city": got})

    @server.tool()
    @inject(container)
    async def poem(
        topic: str,
        who: Annotated[str, Resolve(role)],
        sampled: Annotated[types.CreateMessageResult, Resolve(sample)],
    ) -> str:
        assert isinstance(sampled, types.CreateMessageResult)
        assert isinstance(sampled.content, types.TextContent)
        return json.dumps({"role": who, "text": sampled.content.text})

    @server.tool()
    async def ping() -> str:
        return "pong"

    return server


SERVER = build()


async def never_called_elicit(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult:
    raise AssertionError("rounds are driven by hand")  # pragma: no cover


async def never_called_sample(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    raise AssertionError("rounds are driven by hand")  # pragma: no cover


def hostile_client() -> Any:
    return client(
        SERVER,
        MODE,
        elicitation_callback=never_called_elicit,
        sampling_callback=never_called_sample,
    )


def inner(token: str) -> dict[str, Any]:
    """The plaintext envelope of a token this server sealed."""
    claims: dict[str, Any] = json.loads(CODEC.unseal(token))
    return claims


def forge(token: str, state: str) -> str:
    """Seal *state* in a copy of *token*'s envelope: what a holder of the key could send."""
    claims = inner(token)
    claims["s"] = state
    return CODEC.seal(json.dumps(claims).encode())


class Pool:
    """Genuine tokens of honest rounds, gathered in a client session of their own."""

    def __init__(self) -> None:
        self.tokens: dict[str, str] = {}  # label -> token
        self.digests: dict[tuple[str, str], str] = {}  # (wire key, question text) -> digest
        self.keys: dict[str, str] = {}  # resolver name -> wire key

    async def gather(self) -> None:
        async with hostile_client() as c:
            for topic in ("a", "b"):
                first = await self._round(c, "profile", topic, None, None)
                (name_key,) = first.input_requests
                self.keys["ask_name"] = name_key
                self.tokens[f"profile {topic} r1"] = first.request_state
                self._pin(first)
                honest = {
                    name_key: types.ElicitResult(action="accept", content={"name": HONEST_NAME})
                }
                second = await self._round(c, "profile", topic, honest, first.request_state)
                (city_key,) = second.input_requests
                self.keys["ask_city"] = city_key
                self.tokens[f"profile {topic} r2"] = second.request_state
                self._pin(second)
                sampled = await self._round(c, "poem", topic, None, None)
                (self.keys["sample"],) = sampled.input_requests
                self.tokens[f"poem {topic} r1"] = sampled.request_state
                self._pin(sampled)
        self.keys["role"] = self.keys["ask_name"].replace("ask_name", "role")

    async def _round(
        self, c: Any, tool: str, topic: str, answers: Any, state: str | None
    ) -> types.InputRequiredResult:
        result = await c.session.call_tool(
            tool,
            {"topic": topic},
            input_responses=answers,
            request_state=state,
            allow_input_required=True,
        )
        assert isinstance(result, types.InputRequiredResult)
        assert result.input_requests and result.request_state
        return result

    def _pin(self, result: types.InputRequiredResult) -> None:
        asked = json.loads(inner(result.request_state or "")["s"])["asked"]
        for key, request in (result.input_requests or {}).items():
            self.digests[key, question_text(request)] = asked[key]


def question_text(request: Any) -> str:
    if isinstance(request, types.ElicitRequest):
        return request.params.message
    assert isinstance(request, types.CreateMessageRequest)
    content = request.params.messages[0].content
    assert isinstance(content, types.TextContent)
    return f"sample {content.text}"


# -- strategies ---------------------------------------------------------------------------

# Answers must survive JSON on the wire, so they hold no lone surrogates; states may.
edge_text = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=12),
    st.sampled_from(["", "\x00", "\u202e", "🦄" * 3, "a\u0301", "\ufeff", "名前", "\U0010ffff"]),
)
state_text = st.one_of(edge_text, st.text(min_size=20, max_size=60), st.just("\ud800"))
tags = edge_text.map(lambda t: f"in:{t}")
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | edge_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(edge_text, inner, max_size=3),
    max_leaves=5,
)


def elicit_result(content: Any, action: str = "accept") -> types.ElicitResult:
    return types.ElicitResult.model_construct(action=action, content=content)


responses = st.one_of(
    tags.map(lambda t: elicit_result({"name": t})),
    tags.map(lambda t: elicit_result({"city": t})),
    st.sampled_from(["decline", "cancel"]).map(lambda a: elicit_result(None, a)),
    st.sampled_from(["accept", "maybe", ""]).map(lambda a: elicit_result(None, a)),
    json_values.map(lambda v: elicit_result({"name": v})),
    json_values.map(lambda v: elicit_result(v)),
    st.just(elicit_result({"name": "in:" + "x" * 300_000})),
    tags.map(
        lambda t: types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=t), model="m"
        )
    ),
    st.just(types.ListRootsResult(roots=[])),
)

# Strategies refer to the pool symbolically (a resolver's name, a token's index): the pool
# is gathered at run time, and every draw happens up front, outside the event loop.
RESOLVERS = ("ask_name", "ask_city", "sample", "role")
key_refs = st.sampled_from(RESOLVERS).map(lambda r: ("ref", r)) | edge_text
digest_refs = st.integers(0, 15).map(lambda i: ("digest", i)) | edge_text
record_values = st.one_of(
    json_values,
    tags.map(lambda t: {"action": "accept", "content": {"name": "st" + t[2:]}}),
    tags.map(lambda t: {"action": "accept", "content": {"city": "st" + t[2:]}}),
    st.just({"action": "accept", "content": {"name": "admin"}}),
)
mutations = st.one_of(
    st.tuples(st.just("garbage"), json_values.map(json.dumps) | edge_text),
    st.tuples(st.just("asked"), key_refs, digest_refs),
    st.tuples(st.just("answers"), key_refs, digest_refs, record_values),
    st.tuples(st.just("version"), json_values),
    st.just(("big",)),
)
# (prefer a token of this very tool and topic, index into the candidates)
token_picks = st.tuples(st.booleans(), st.integers(0, 63))
fraction = st.floats(0, 1, exclude_max=True)
state_plans = st.one_of(
    st.just(("none",)),
    st.tuples(st.just("text"), state_text),
    st.tuples(st.just("genuine"), token_picks),
    st.tuples(st.just("truncated"), token_picks, fraction),
    st.tuples(st.just("flipped"), token_picks, fraction),
    st.tuples(st.just("forged"), token_picks, mutations),
)
aimed = {
    "ask_name": tags.map(lambda t: elicit_result({"name": t})),
    "ask_city": tags.map(lambda t: elicit_result({"city": t}))
    | st.sampled_from(["decline", "cancel"]).map(lambda a: elicit_result(None, a)),
    "sample": tags.map(
        lambda t: types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=t), model="m"
        )
    ),
}
# Answers under random keys, plus well-aimed ones under the real wire keys.
answer_plans = st.tuples(
    st.dictionaries(key_refs, responses, max_size=2),
    st.fixed_dictionaries({}, optional={k: v | responses for k, v in aimed.items()}),
)


def wire_key(ref: Any) -> str:
    return POOL.keys[ref[1]] if isinstance(ref, tuple) else ref


def pool_digest(ref: Any) -> str:
    if isinstance(ref, tuple):
        digests = sorted(POOL.digests.values())
        return digests[ref[1] % len(digests)]
    return str(ref)


def make_answers(plan: Any) -> dict[str, Any]:
    loose, aimed_ = plan
    answers = {wire_key(ref): value for ref, value in loose.items()}
    answers.update({POOL.keys[name]: value for name, value in aimed_.items()})
    return answers


def pick_token(pick: tuple[bool, int], tool: str, topic: str) -> str:
    prefer_same, index = pick
    labels = sorted(POOL.tokens)
    same = [label for label in labels if label.startswith(f"{tool} {topic} ")]
    candidates = same if prefer_same and same else labels
    return POOL.tokens[candidates[index % len(candidates)]]


def mutate(genuine: str, mutation: Any) -> str:
    """A hostile inner state, mostly a small edit of a genuine one."""
    base = json.loads(inner(genuine)["s"])
    match mutation:
        case ("garbage", text_):
            return str(text_)
        case ("asked", key, digest):
            base.setdefault("asked", {})[wire_key(key)] = pool_digest(digest)
        case ("answers", key, digest, raw):
            base.setdefault("answers", {})[wire_key(key)] = {"q": pool_digest(digest), "r": raw}
        case ("version", value):
            base["v"] = value
        case _:
            base["pad"] = "x" * (1 << 20)
    return json.dumps(base)


def make_state(plan: Any, tool: str, topic: str) -> str | None:
    kind = plan[0]
    if kind == "none":
        return None
    if kind == "text":
        return str(plan[1])
    token = pick_token(plan[1], tool, topic)
    if kind == "genuine":
        return token
    if kind == "truncated":
        return token[: int(plan[2] * len(token))]
    if kind == "flipped":
        at = int(plan[2] * len(token))
        return token[:at] + ("A" if token[at] != "A" else "B") + token[at + 1 :]
    # Forged: sealed in the envelope of that token, so the SDK lets it through when the
    # token was minted for this tool and topic.
    return forge(token, mutate(token, plan[2]))


# -- the oracle ---------------------------------------------------------------------------


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings_in(k)
            yield from strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)


def tagged(sent: dict[str, Any]) -> Iterator[str]:
    """The client's tagged content strings: none may come back in an error message."""
    return (s for s in strings_in(list(sent.values())) if s.startswith("in:"))


def answer_source(
    key: str, question: str, value: str, answers: dict[str, Any], state: dict[str, Any]
) -> bool:
    """True when *value* for *key* came from an answer pinned to *question* as asked now."""
    digest = POOL.digests.get((key, question))
    if digest is None:
        return False  # this exact question was never asked, so no answer can be for it

    def matches(raw: Any) -> bool:
        if not isinstance(raw, dict):
            return False
        if question.startswith("sample "):
            return raw.get("model") is not None and value in strings_in(raw.get("content"))
        if value in ("decline", "cancel"):
            return raw.get("action") == value
        content = raw.get("content")
        return raw.get("action") == "accept" and value in strings_in(content)

    asked = state.get("asked") if isinstance(state.get("asked"), dict) else {}
    raw = answers.get(key)
    if raw is not None and asked.get(key) == digest and matches(raw):
        return True
    recorded = state.get("answers") if isinstance(state.get("answers"), dict) else {}
    entry = recorded.get(key)
    return isinstance(entry, dict) and entry.get("q") == digest and matches(entry.get("r"))


def check_success(
    tool: str, topic: str, got: dict[str, Any], answers: dict[str, Any], state: dict[str, Any]
) -> None:
    assert got["role"] == "user", "a resolver's value was replaced by client input"
    keys = POOL.keys
    if tool == "poem":
        assert answer_source(keys["sample"], f"sample {topic}", got["text"], answers, state)
        return
    assert answer_source(keys["ask_name"], f"Name for {topic}?", got["name"], answers, state)
    city_question = f"City of {got['name']}?"
    assert answer_source(keys["ask_city"], city_question, got["city"], answers, state)


POOL = Pool()
FIGURES: Counter[str] = Counter()


@pytest.fixture(scope="module")
def figures(anyio_backend: str) -> Iterator[Counter[str]]:
    FIGURES.clear()
    yield FIGURES
    record(f"hostile rounds {anyio_backend}", dict(sorted(FIGURES.items())))


@settings(
    max_examples=load_size(60, 800),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    tool=st.sampled_from(["profile", "poem"]),
    topic=st.sampled_from(["a", "b"]),
    state_plan=state_plans,
    answer_plan=answer_plans,
)
async def test_hostile_rounds_never_accept_anything_forged(
    figures: Counter[str], tool: str, topic: str, state_plan: Any, answer_plan: Any
) -> None:
    if not POOL.tokens:
        await POOL.gather()
    kind = state_plan[0]
    state = make_state(state_plan, tool, topic)
    answers = make_answers(answer_plan)
    sent = {
        key: value.model_dump(mode="json", by_alias=True, exclude_none=True)
        for key, value in answers.items()
    }
    tags_sent = set(tagged(sent))
    figures["inputs tried"] += 1
    figures[f"state {kind}"] += 1

    async with hostile_client() as c:
        try:
            result = await c.session.call_tool(
                tool,
                {"topic": topic},
                input_responses=answers or None,
                request_state=state,
                allow_input_required=True,
            )
        except MCPError as error:
            # Only the SDK's refusal of a token it cannot verify (or of a malformed answer).
            assert error.code == types.INVALID_PARAMS, error
            assert not any(t in error.message for t in tags_sent)
            figures["outcome: rejected (-32602)"] += 1
        else:
            check_result(tool, topic, result, sent, plain_state(state))
            figures[f"outcome: {outcome_name(result)}"] += 1
        # Whatever happened, the server still answers.
        pong = await c.call_tool("ping", {})
        assert text(pong) == "pong"


def plain_state(token: str | None) -> dict[str, Any]:
    """The inner state of a token the server accepted ({} when absent or not an object)."""
    if token is None:
        return {}
    try:
        plain = json.loads(inner(token)["s"])
    except ValueError:
        return {}
    return plain if isinstance(plain, dict) else {}


def outcome_name(result: Any) -> str:
    if isinstance(result, types.InputRequiredResult):
        return "re-asked"
    return "error result" if result.is_error else "completed"


def check_result(
    tool: str, topic: str, result: Any, sent: dict[str, Any], state: dict[str, Any]
) -> None:
    if isinstance(result, types.InputRequiredResult):
        assert result.input_requests
        for key, request in result.input_requests.items():
            question = question_text(request)
            assert key in POOL.keys.values(), f"asked an unknown question {key!r}"
            if key == POOL.keys["ask_city"]:
                # A dependent question shows the name it depends on: an accepted one.
                assert question.startswith("City of ")
            else:
                assert (key, question) in POOL.digests, f"asked {question!r}"
        return
    assert isinstance(result, types.CallToolResult)
    if result.is_error:
        message = text(result)
        for leaked in tagged(sent):
            assert leaked not in message, "an error message echoed the client's content"
        return
    check_success(tool, topic, json.loads(text(result)), sent, state)


async def test_a_forged_answer_for_a_resolver_that_asks_nothing_is_ignored() -> None:
    if not POOL.tokens:
        await POOL.gather()
    genuine = POOL.tokens["profile a r2"]
    plain = json.loads(inner(genuine)["s"])
    role_key = POOL.keys["role"]
    plain["answers"][role_key] = {"q": "anything", "r": "admin"}
    plain["asked"][role_key] = "anything"
    city = types.ElicitResult(action="accept", content={"city": "Paris"})
    forged_role = types.ElicitResult(action="accept", content={"name": "admin"})
    async with hostile_client() as c:
        result = await c.session.call_tool(
            "profile",
            {"topic": "a"},
            input_responses={POOL.keys["ask_city"]: city, role_key: forged_role},
            request_state=forge(genuine, json.dumps(plain)),
            allow_input_required=True,
        )
    assert isinstance(result, types.CallToolResult)
    assert json.loads(text(result)) == {"role": "user", "name": HONEST_NAME, "city": "Paris"}


async def test_a_token_that_does_not_unseal_is_the_sdks_clear_error() -> None:
    with pytest.raises(InvalidRequestState):
        CODEC.unseal("v1.not-a-token")
    async with hostile_client() as c:
        with pytest.raises(MCPError) as caught:
            await c.session.call_tool(
                "profile", {"topic": "a"}, request_state="v1.not-a-token", allow_input_required=True
            )
    assert caught.value.code == types.INVALID_PARAMS


async def test_the_oracle_accepts_honest_rounds_and_would_catch_an_unsourced_value() -> None:
    if not POOL.tokens:
        await POOL.gather()
    token = POOL.tokens["profile b r2"]
    city = types.ElicitResult(action="accept", content={"city": "in:Paris"})
    sent = {POOL.keys["ask_city"]: city.model_dump(mode="json", exclude_none=True)}
    async with hostile_client() as c:
        result = await c.session.call_tool(
            "profile",
            {"topic": "b"},
            input_responses={POOL.keys["ask_city"]: city},
            request_state=token,
            allow_input_required=True,
        )
    check_result("profile", "b", result, sent, plain_state(token))
    assert json.loads(text(result)) == {"role": "user", "name": HONEST_NAME, "city": "in:Paris"}
    # The same result without the state that pinned the question has no source.
    with pytest.raises(AssertionError):
        check_result("profile", "b", result, sent, {})
    # Nor would a value nobody sent.
    forged = {"role": "user", "name": HONEST_NAME, "city": "in:Rome"}
    with pytest.raises(AssertionError):
        check_success("profile", "b", forged, sent, plain_state(token))
