// The test model (__test__/ort/model.ts) is what the ONNX Runtime tests measure with, so the
// builder itself is checked first: ONNX Runtime loads what it writes and computes the function
// it describes, and the same seed gives the same bytes.
import test from 'ava'
import { INPUT, OUTPUT, TEST_MODEL, modelBytes, modelInput, modelWeights, referenceOutput, writeModel } from './ort/model'
import { ort } from './ort/runtime'
import { ortTest } from './ort/test'

ortTest("the test model runs on ONNX Runtime's CPU provider and gives the output computed in JS", async (t) => {
  const { InferenceSession, Tensor } = ort()
  const session = await InferenceSession.create(writeModel(TEST_MODEL))
  t.deepEqual([session.inputNames, session.outputNames], [[INPUT], [OUTPUT]])
  const batch = 8
  const x = modelInput(TEST_MODEL, batch)
  const out = await session.run({ [INPUT]: new Tensor('float32', x, [batch, TEST_MODEL.width]) })
  await session.release()
  const y = out[OUTPUT]
  t.deepEqual(y.dims, [batch, TEST_MODEL.width])
  const expected = referenceOutput(modelWeights(TEST_MODEL), x, batch)
  const got = y.data as Float32Array
  let worst = 0
  let largest = 0
  for (let i = 0; i < expected.length; i++) {
    worst = Math.max(worst, Math.abs(got[i] - expected[i]))
    largest = Math.max(largest, Math.abs(expected[i]))
  }
  // float32 kernels against a float64 loop: equal to rounding, over outputs of order 1.
  t.true(largest > 0.1, `the outputs are not all near zero (largest ${largest})`)
  t.true(worst <= 1e-5 * Math.max(1, largest), `largest difference ${worst}`)
})

test('the test model is the same bytes for a seed, other bytes for another, with MBs of weights', (t) => {
  const a = modelBytes(modelWeights(TEST_MODEL))
  t.deepEqual(modelBytes(modelWeights(TEST_MODEL)), a)
  t.notDeepEqual(modelBytes(modelWeights({ ...TEST_MODEL, seed: TEST_MODEL.seed + 1 })), a)
  t.true(a.length > TEST_MODEL.layers * TEST_MODEL.width * TEST_MODEL.width * 4, `${a.length} bytes`)
})
