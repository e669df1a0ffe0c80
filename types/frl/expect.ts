// What @fastify/rate-limit's type test takes from tstyche, as plain declarations: `expect(value).type.toBe<T>()`
// holds only when the two types are the same, the other matchers when the value fits. Compiled, never run.

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false

interface TypeMatchers<T> {
  toBe: <U>(...sameType: Equal<T, U> extends true ? [] : [never]) => void
  toBeAssignableFrom: (value: T) => void
  toBeCallableWith: (...args: T extends (...args: infer P) => unknown ? P : never) => void
}

export declare function expect<T> (value?: T): { type: TypeMatchers<T> }
