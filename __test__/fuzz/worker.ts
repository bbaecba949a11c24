// A worker thread's fuzz run on a factory it shares with the main thread and other workers
// (see modes.ts): reports progress so the main thread can terminate it mid-run.
import { parentPort, workerData } from 'node:worker_threads'
import { summary } from './modes'
import { run, type RunOptions } from './runner'

const opts = workerData as RunOptions
run({ ...opts, onProgress: (done) => parentPort!.postMessage({ type: 'progress', done }) }).then((r) =>
  parentPort!.postMessage({ type: 'result', result: summary(r) }),
)
