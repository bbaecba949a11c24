/** `Stream` over the native stream handle. */
import type { Native } from './native'
import type { Stream, StreamEvent } from './types'
import { arenaError, ERR_ARENA_RELEASED } from './errors'
import { instance, wrongThis } from './args'

class StreamEventImpl implements StreamEvent {
  /** Marks this class's objects (a method called on anything else gets a coded error). */
  readonly #event = true
  constructor(readonly native: Native.NativeEvent) {}
  get syncId(): bigint {
    if (typeof this !== 'object' || this === null || !(#event in this)) throw wrongThis(this, 'an event from stream.record()')
    return this.native.syncId()
  }
}

/** Internal: the concrete stream. */
export class StreamImpl implements Stream {
  /** The native handle's number (what the fast path is given). */
  readonly handle: number
  /** Marks this class's objects (a method called on anything else gets a coded error). */
  readonly #stream = true
  constructor(readonly native: Native.NativeStream) {
    this.handle = native.handle()
  }

  /** `self` (a method's `this`) as a stream, or a coded error. */
  static #self(self: unknown): StreamImpl {
    if (typeof self !== 'object' || self === null || !(#stream in self)) throw wrongThis(self, 'a stream from factory.createStream()')
    return self
  }
  get deviceId(): number {
    const self = StreamImpl.#self(this)
    return self.native.deviceId()
  }
  get id(): bigint {
    const self = StreamImpl.#self(this)
    return self.native.id()
  }
  record(): StreamEvent {
    const self = StreamImpl.#self(this)
    return new StreamEventImpl(self.native.record())
  }
  wait(event: StreamEvent): void {
    const self = StreamImpl.#self(this)
    self.native.wait(instance('event', event, StreamEventImpl, 'must come from stream.record()').native)
  }
  synchronize(): void {
    const self = StreamImpl.#self(this)
    self.native.synchronize()
  }
  release(): void {
    const self = StreamImpl.#self(this)
    self.native.release()
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
