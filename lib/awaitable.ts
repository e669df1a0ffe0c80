// Values that may or may not be promises, handled without making a promise when none is needed: the hot
// path runs at once when every answer is at hand.

export function isPromise<T> (value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null)?.then === 'function'
}

/**
 * `next(value)`, at once when `value` is at hand, or once it resolves. Not named `then`: a module namespace
 * with a `then` export looks like a promise to `await import()`.
 */
export function andThen<T, R> (value: T | PromiseLike<T>, next: (value: T) => R | PromiseLike<R>): R | PromiseLike<R> {
  return isPromise(value) ? value.then(next) : next(value)
}

/**
 * `next(context, value)`, as `andThen` does, for a continuation that is a function of its own rather than a
 * closure: when `value` is at hand, nothing is made (the request pipeline's stages, ./request/pipeline.ts).
 */
export function andThenWith<C, T, R> (
  context: C, value: T | PromiseLike<T>, next: (context: C, value: T) => R | PromiseLike<R>
): R | PromiseLike<R> {
  return isPromise(value) ? value.then(resolved => next(context, resolved)) : next(context, value)
}
