"""The runtime: what running a plan's steps needs (context variables, worker threads,
home tasks, resources and their teardown, the scope cache, values shared within a
call, asking, and what a failure says). It never reads a function or builds a plan."""
