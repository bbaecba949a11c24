// Issue 11: lifetime cases that need a fresh process and the garbage collector, each run in a
// child process (as @napi-rs/canvas tests GC bugs): fixtures/lifetimes.ts does the work.
import test from 'ava'
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'

const root = join(__dirname, '..')

function run(name: string): { code: number | null; out: string; err: string } {
  const r = spawnSync(process.execPath, ['--expose-gc', '--import', 'tsx', join(__dirname, 'fixtures', 'lifetimes.ts'), name], {
    cwd: root,
    encoding: 'utf8',
    timeout: 90_000,
  })
  return { code: r.status, out: r.stdout, err: r.stderr }
}

for (const [name, title] of [
  ['two-copies', 'two copies of the package in one thread each work on their own state, also after one is collected (item 1)'],
  ['collect-released', 'collecting a released allocator or stream leaves the live one in its handle slot working (item 3)'],
  ['collect-unreleased', 'a collected allocator handle gives its user back and a collected stream resets its chunks (items 7, 8)'],
] as const) {
  test(title, (t) => {
    const r = run(name)
    t.is(r.code, 0, r.err)
    t.is((JSON.parse(r.out.trim().split('\n').pop() ?? '{}') as { ok?: boolean }).ok, true, r.out)
  })
}
