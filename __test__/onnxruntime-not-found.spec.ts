// Issue 12: onnxruntime-node is an optional peer dependency. Without it, or with one that is
// not usable, useWithOnnxRuntime throws a coded error and the rest of cuda-arena works. Each case
// runs in a child process whose module resolution is changed by a preload script: onnxruntime-node
// absent, a package whose library is not loaded, or one that throws when loaded.
import test from 'ava'
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { ortAvailable } from './ort/runtime'
import { ortTest } from './ort/test'

const TSX = require.resolve('tsx/cjs')
const INDEX = require.resolve('../ts/index')

/** A package directory standing in for onnxruntime-node; `main` is its index.js. */
function fakePackage(main: string, withLibrary: boolean): string {
  const root = mkdtempSync(join(tmpdir(), 'fake-onnxruntime-node-'))
  writeFileSync(join(root, 'package.json'), JSON.stringify({ name: 'onnxruntime-node', version: '1.30.0', main: 'index.js' }))
  writeFileSync(join(root, 'index.js'), main)
  if (withLibrary) {
    // The real library under the path onnxruntime-node has it, but never loaded by this package.
    const real = join(dirname(require.resolve('onnxruntime-node/package.json')), 'bin', 'napi-v6', process.platform, process.arch, 'libonnxruntime.so.1')
    const dir = join(root, 'bin', 'napi-v6', process.platform, process.arch)
    mkdirSync(dir, { recursive: true })
    symlinkSync(real, join(dir, 'libonnxruntime.so.1'))
  }
  return root
}

/**
 * Runs useWithOnnxRuntime in a child whose resolution of `onnxruntime-node…` goes to `root`
 * (or fails, for `undefined`); prints the error's code, the code of a call with an invalid config
 * (refused before onnxruntime-node is looked for), then whether a factory allocates.
 */
function child(root: string | undefined): string[] {
  const preload = join(mkdtempSync(join(tmpdir(), 'ort-preload-')), 'preload.js')
  writeFileSync(
    preload,
    `const Module = require('module')
     const resolve = Module._resolveFilename
     Module._resolveFilename = function (request, ...rest) {
       if (request === 'onnxruntime-node' || request.startsWith('onnxruntime-node/')) {
         const root = ${JSON.stringify(root ?? null)}
         if (root === null) { const e = new Error("Cannot find module '" + request + "'"); e.code = 'MODULE_NOT_FOUND'; throw e }
         return resolve.call(this, request === 'onnxruntime-node' ? root : root + request.slice('onnxruntime-node'.length), ...rest)
       }
       return resolve.call(this, request, ...rest)
     }`,
  )
  const script = `
    const { AllocatorFactory, useWithOnnxRuntime } = require(${JSON.stringify(INDEX)})
    const f = new AllocatorFactory({ name: 'not-found', backend: 'host' })
    try { useWithOnnxRuntime(f, { name: 'Cpu' }); console.log('registered') } catch (e) { console.log(e.code) }
    try { useWithOnnxRuntime(f, { name: 'Cpu' }, { 'arena.extend_strategy': '7' }) } catch (e) { console.log(e.code) }
    const a = f.createAllocator({ name: 'Cpu' })
    a.free(a.alloc(1000))
    f.releaseAllocator(a)
    console.log(f.deviceStats(0).rawBytesOutstanding === 0n ? 'works' : 'leaked')`
  const r = spawnSync(process.execPath, ['--require', TSX, '--require', preload, '-e', script], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`child failed (${r.status} ${r.signal}): ${r.stderr}`)
  return r.stdout.trim().split('\n')
}

test('without onnxruntime-node, useWithOnnxRuntime is ERR_ORT_NOT_FOUND, a bad config still ERR_ARENA_INVALID_CONFIG, and the rest of cuda-arena works', (t) => {
  t.deepEqual(child(undefined), ['ERR_ORT_NOT_FOUND', 'ERR_ARENA_INVALID_CONFIG', 'works'])
})

ortTest('an onnxruntime-node whose ONNX Runtime library is not loaded is ERR_ORT_NOT_FOUND', (t) => {
  t.true(ortAvailable, 'needs the real library to link to')
  t.deepEqual(child(fakePackage('module.exports = {}', true)), ['ERR_ORT_NOT_FOUND', 'ERR_ARENA_INVALID_CONFIG', 'works'])
})

test('an onnxruntime-node that fails to load is ERR_ORT_LOAD', (t) => {
  t.deepEqual(child(fakePackage("throw new Error('no binding for this platform')", false)), ['ERR_ORT_LOAD', 'ERR_ARENA_INVALID_CONFIG', 'works'])
})
