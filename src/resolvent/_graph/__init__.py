"""The graph: the plan as data, the registry of providers, the compiler that walks a
function's resolvers into a plan, its checks and the topological sort."""
