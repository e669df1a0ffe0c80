// The first `n` of `promises` to fulfil, in the order they did: for requests some of which are held open on
// purpose (in flight until the test lets them end) while the others are answered at once.
export async function firstFulfilled<T> (promises: ReadonlyArray<Promise<T>>, n: number): Promise<T[]> {
  const got: T[] = []
  return await new Promise(resolve => {
    for (const promise of promises) {
      promise.then(value => {
        got.push(value)
        if (got.length === n) resolve(got)
      }, () => {})
    }
  })
}
