/** `Stream` over the native stream handle. */
import type { Native } from './native'
import type { Stream, StreamEvent } from './types'
import { arenaError, ERR_ARENA_RELEASED } from './errors'
import { instance } from './args'

class StreamEventImpl implements StreamEvent {
  constructor(readonly native: Native.NativeEvent) {}
  get syncId(): bigint {
    return this.native.syncId()
  }
}

/** Internal: the concrete stream. */
export class StreamImpl implements Stream {
  /** The native handle's number (what the fast path is given). */
  readonly handle: number
  constructor(readonly native: Native.NativeStream) {
    this.handle = native.handle()
  }
  get deviceId(): number {
    return this.native.deviceId()
  }
  get id(): bigint {
    return this.native.id()
  }
  record(): StreamEvent {
    return new StreamEventImpl(this.native.record())
  }
  wait(event: StreamEvent): void {
    this.native.wait(instance('event', event, StreamEventImpl, 'must come from stream.record()').native)
  }
  synchronize(): void {
    this.native.synchronize()
  }
  release(): void {
    this.native.release()
  }
}

/** The stream behind a user-supplied value (a `Stream` of this copy of the package). */
export function streamImpl(stream: unknown, name = 'stream'): StreamImpl {
  return instance(name, stream, StreamImpl, 'must come from factory.createStream()')
}

/** The native handle of a user-supplied stream. */
export function nativeStream(stream: unknown, name = 'stream'): Native.NativeStream {
  return streamImpl(stream, name).native
}

/** As {@link nativeStream}, and `ERR_ARENA_RELEASED` if it was released. */
export function liveStream(stream: unknown, name = 'stream'): Native.NativeStream {
  const s = nativeStream(stream, name)
  if (s.isReleased()) throw arenaError(ERR_ARENA_RELEASED, `the ${name} was used after it was released`)
  return s
}
