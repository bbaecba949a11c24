/** `Stream` over the native stream handle. */
import type { Native } from './native'
import type { Stream, StreamEvent } from './types'
import { invalidArgument } from './errors'

class StreamEventImpl implements StreamEvent {
  constructor(readonly native: Native.NativeEvent) {}
  get syncId(): bigint {
    return this.native.syncId()
  }
}

/** Internal: the concrete stream. */
export class StreamImpl implements Stream {
  constructor(readonly native: Native.NativeStream) {}
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
    if (!(event instanceof StreamEventImpl)) throw invalidArgument('event', event, 'must come from stream.record()')
    this.native.wait(event.native)
  }
  synchronize(): void {
    this.native.synchronize()
  }
  release(): void {
    this.native.release()
  }
}

/** The native handle of a user-supplied stream. */
export function nativeStream(stream: unknown, name = 'stream'): Native.NativeStream {
  if (!(stream instanceof StreamImpl)) throw invalidArgument(name, stream, 'must come from factory.createStream()')
  return stream.native
}
