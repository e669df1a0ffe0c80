// GraphQL on Mercurius (`fastify-rate-guard/mercurius`): limits per root field and operation type, a query's
// cost before execution settled after it, refusals in GraphQL's shape. (Being built: issue 45.)
export {}
