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
