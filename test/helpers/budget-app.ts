// An app for the tests of fastify.rateGuard.budget() (test/budget*.test.ts): the plugin registered with `opts`
// (clients named by their `x-client` header), one budget made of `budgetOptions`, and a way to get a request
// of a client to spend it with.
import Fastify from 'fastify'
import type { FastifyInstance, FastifyRequest, FastifyServerOptions } from 'fastify'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import type { RateGuardBudget, RateGuardOptions, RouteRateLimitOptions } from '../../lib/index.js'

export interface BudgetApp {
  app: FastifyInstance
  budget: RateGuardBudget
  /** A request of `client` (its key, as the key generator reads it: the `x-client` header). */
  of: (client: string) => Promise<FastifyRequest>
}

export async function budgetApp (
  t: Test, opts: RateGuardOptions, budgetOptions: RouteRateLimitOptions, server: FastifyServerOptions = {}
): Promise<BudgetApp> {
  const app = Fastify(server)
  t.teardown(() => app.close())
  await app.register(rateGuard, { global: false, keyGenerator: request => String(request.headers['x-client']), ...opts })
  const budget = app.rateGuard.budget(budgetOptions)
  let last: FastifyRequest | undefined
  app.get('/request', async request => { last = request; return 'ok' })
  await app.ready()
  const of = async (client: string): Promise<FastifyRequest> => {
    await app.inject({ url: '/request', headers: { 'x-client': client } })
    return last!
  }
  return { app, budget, of }
}

/** A spend's or a hold's answer, its values alone (its functions left out). */
export function fields (answer: object): Record<string, unknown> {
  return Object.fromEntries(Object.entries(answer).filter(([, v]) => typeof v !== 'function'))
}
