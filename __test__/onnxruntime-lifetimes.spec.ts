// Issue 12: registration, unregistration, session release and process exit, in every order,
// never crash. Each order runs in its own process (__test__/ort/lifecycle-child.ts spells the
// steps), since a crash or the way a process ends is the point; the child checks that every run
// gives the same output, and the test that it ends with status 0, no signal, and `done`.
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { ortTest } from './ort/test'

const CHILD = join(__dirname, 'ort', 'lifecycle-child.ts')
const TSX = require.resolve('tsx/cjs')

const ORDERS: [string, string][] = [
  ['RSNXU', 'register, session, run, release the session, unregister, exit'],
  ['RSNUNX', 'register, session, run, unregister, run again, release the session, exit'],
  ['RSNU', 'register, session, run, unregister, exit with the session open'],
  ['RSN', 'register, session, run, exit registered with the session open'],
  ['RSNE', 'register, session, run, process.exit() registered with the session open'],
  ['RSNQ', 'register, session, process.exit() while a run is in flight'],
  ['PRNSNXU', 'plain session before registering, then one on the arena, both run, release, unregister'],
  ['RUSNX', 'register, unregister, then a session (ONNX Runtime’s allocator), run, release'],
  ['RSFNUNX', 'register, session, release the registration’s allocator, run, unregister, run, release'],
  ['RSXURSNXU', 'register, session, release, unregister, register again, session, run, release, unregister'],
  ['RSGNX', 'register, session, drop and collect the registration object, run, release, exit registered'],
  ['WRSNXU', 'a worker registers, runs and unregisters and ends; then the main thread does the same'],
  ['wRSNXU', 'a worker registers, runs and ends without unregistering; its registration goes with it, and the main thread registers'],
  ['RSNVNXU', 'the main thread registers and runs; a worker’s registration of the same memory info is refused, the main one stays'],
]

for (const [steps, what] of ORDERS) {
  ortTest(`never crashes: ${what} (${steps})`, (t) => {
    const r = spawnSync(process.execPath, ['--expose-gc', '--require', TSX, CHILD, steps], { encoding: 'utf8', timeout: 90_000 })
    t.is(r.signal, null, r.stderr)
    t.is(r.status, 0, r.stderr)
    t.is(r.stdout.trim().split('\n').at(-1), 'done', r.stderr)
  })
}
