import test from 'ava'
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs'
import { join } from 'node:path'
import { tmpdir } from 'node:os'
import { execFileSync } from 'node:child_process'

test("the README's TypeScript example runs and prints what its comments say", (t) => {
  const readme = readFileSync(join(__dirname, '..', 'README.md'), 'utf8')
  const block = /```ts\n([\s\S]*?)```/.exec(readme)
  t.truthy(block, 'the README has a ts example')
  const source = block![1].replace("from 'cuda-arena'", `from ${JSON.stringify(join(__dirname, '..', 'ts', 'index'))}`)
  const file = join(mkdtempSync(join(tmpdir(), 'cuda-arena-readme-')), 'example.ts')
  writeFileSync(file, source)
  const tsx = join(__dirname, '..', 'node_modules', '.bin', 'tsx')
  const out = execFileSync(tsx, [file], { encoding: 'utf8' }).trim().split('\n')
  t.deepEqual(out, ['1024n', "0n -1", 'ERR_ARENA_UNKNOWN_POINTER', '0n'])
})
