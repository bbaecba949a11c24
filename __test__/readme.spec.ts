import test from 'ava'
import { copyFileSync, readFileSync, writeFileSync, mkdtempSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { tmpdir } from 'node:os'
import { execFileSync } from 'node:child_process'
import { TEST_MODEL, writeModel } from './ort/model'
import { ortTest } from './ort/test'

test("the README's TypeScript example runs and prints what its comments say", (t) => {
  const readme = readFileSync(join(__dirname, '..', 'README.md'), 'utf8')
  // The allocator on its own: the ts block that makes an allocator without ONNX Runtime.
  const block = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)]
    .map((m) => m[1])
    .find((b) => b.includes('createAllocator(') && !b.includes('useWithOnnxRuntime'))
  t.truthy(block, 'the README has a ts example of the allocator on its own')
  const source = block!.replace("from 'cuda-arena'", `from ${JSON.stringify(join(__dirname, '..', 'ts', 'index'))}`)
  const file = join(mkdtempSync(join(tmpdir(), 'cuda-arena-readme-')), 'example.ts')
  writeFileSync(file, source)
  const tsx = join(__dirname, '..', 'node_modules', '.bin', 'tsx')
  const out = execFileSync(tsx, [file], { encoding: 'utf8' }).trim().split('\n')
  t.deepEqual(out, ['1024n', "0n -1", 'ERR_ARENA_UNKNOWN_POINTER', '0n'])
})

ortTest("the README's onnxruntime-node example runs on the test model and prints what its comments say", (t) => {
  const readme = readFileSync(join(__dirname, '..', 'README.md'), 'utf8')
  const block = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.includes('useWithOnnxRuntime'))
  t.truthy(block, 'the README has an onnxruntime-node example')
  // What each console.log line prints: its comment, up to a colon.
  const expected = block!
    .split('\n')
    .filter((line) => line.includes('console.log('))
    .map((line) => line.slice(line.lastIndexOf('//') + 2).split(':')[0].trim())
  t.true(expected.length >= 3)
  const source = block!
    .replace("from 'cuda-arena'", `from ${JSON.stringify(join(__dirname, '..', 'ts', 'index'))}`)
    .replace("from 'onnxruntime-node'", `from ${JSON.stringify(dirname(require.resolve('onnxruntime-node/package.json')))}`)
  const dir = mkdtempSync(join(tmpdir(), 'cuda-arena-readme-ort-'))
  writeFileSync(join(dir, 'example.ts'), source)
  copyFileSync(writeModel(TEST_MODEL), join(dir, 'model.onnx'))
  const tsx = join(__dirname, '..', 'node_modules', '.bin', 'tsx')
  const out = execFileSync(tsx, ['example.ts'], { cwd: dir, encoding: 'utf8' }).trim().split('\n')
  t.deepEqual(out, expected)
})
