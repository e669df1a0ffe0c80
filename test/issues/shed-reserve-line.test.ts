// Regression (issue 46, found writing the combination test): the line from which the shedder sheds the classes
// below critical, inFlight × (1 − reserve), was compared as computed in floating point, where 50 × (1 − 0.42) is
// 29.000000000000004: with 29 requests in flight a normal one was still let in, the critical class's reserve one
// short of its 21, and a sample at that peak was calm. 84 pairs of a capacity up to 200 and a reserve in
// hundredths round up so.
import t from 'tap'
import { checkShed } from '../../lib/options/shed.js'
import { NO_READINGS, Shedder } from '../../lib/shed/shedder.js'

const shedderAt = (inFlight: number, reserve: number, running: number): Shedder => {
  const shedder = new Shedder(checkShed({ inFlight, reserve, eventLoopDelay: false, eventLoopUtilization: false }, 'shed')!, 0)
  for (let i = 0; i < running; i++) shedder.started()
  return shedder
}

t.test('inFlight 50, reserve 0.42: the others are shed from 29 in flight, the critical class from 50', async t => {
  t.equal(shedderAt(50, 0.42, 28).decide('normal'), null, '28 in flight: a normal request is let in')
  t.equal(shedderAt(50, 0.42, 29).decide('normal'), 'in-flight', '29: shed, the 21 left kept for the critical class')
  t.equal(shedderAt(50, 0.42, 49).decide('critical'), null, 'a critical one up to the capacity')
  t.equal(shedderAt(50, 0.42, 50).decide('critical'), 'in-flight')
  // Sheddable from 50 × 0.58² = 16.82: 17.
  t.equal(shedderAt(50, 0.42, 16).decide('sheddable'), null)
  t.equal(shedderAt(50, 0.42, 17).decide('sheddable'), 'in-flight')
  const sampled = shedderAt(50, 0.42, 29)
  sampled.sample(100, null, NO_READINGS)
  t.equal(sampled.snapshot().over, null, 'a full capacity is no pressure on the shares')
})

t.test('inFlight 10, reserve 0.3: sheddable from 4.9 → 5 (0.7² = 0.48999999999999994 in floating point)', async t => {
  t.equal(shedderAt(10, 0.3, 4).decide('sheddable'), null)
  t.equal(shedderAt(10, 0.3, 5).decide('sheddable'), 'in-flight')
})

t.test('a line that is no whole number: shed from the next one up (inFlight 3, reserve 0.2: 2.4)', async t => {
  t.equal(shedderAt(3, 0.2, 2).decide('normal'), null)
  t.equal(shedderAt(3, 0.2, 3).decide('normal'), 'in-flight')
})
