// WebSocket on @fastify/websocket (`fastify-rate-guard/websocket`): messages, bytes and connections per client
// and per connection, refused by the app's choice. (Being built: issue 45.)
export {}
