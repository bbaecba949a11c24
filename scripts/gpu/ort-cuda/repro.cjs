'use strict'
const { modules, target, rng, MODELS } = require('./lib.cjs')
const T = target()
const { ort, arena } = modules()
ort.env.logLevel = 'error'
const [mlpPath, bertPath, batches = '8,300,64', steps = 'A,B,C'] = process.argv.slice(2)
const factory = new arena.AllocatorFactory({ name: 'repro', backend: T.backend })
const reg = arena.useWithOnnxRuntime(factory, T.memory)
const onArena = { ...reg.sessionOptions, executionProviders: T.providers }
const onOrt = { executionProviders: T.providers }
const say = (m) => process.stdout.write(m + '\n')
async function main() {
  for (const st of steps.split(',')) {
    const [kind, where] = st.split(':')
    say(`step ${st}`)
    const isBert = kind === 'B' || kind === 'C'
    const path = isBert ? bertPath : mlpPath
    const model = isBert ? MODELS.bert : MODELS.mlp
    const s = await ort.InferenceSession.create(path, (kind === 'A' || kind === 'C') ? onArena : onOrt)
    say(`  created`)
    const r = rng(1)
    for (const b of (isBert ? ['4'] : batches.split(','))) {
      await s.run(model.inputs(ort, Number(b), 64, r))
      say(`  ran ${b}`)
    }
    await s.release()
    say(`  released`)
  }
  say('done')
}
main().catch((e) => { say('FAILED ' + (e && e.stack)); process.exitCode = 2 })
