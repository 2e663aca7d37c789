// SIGTERM and SIGINT for the long-running commands (`ins serve`, `ins worker`): the first one
// stops gracefully; a second one, while that stop runs, ends the process at once, as the default
// action would (128 + the signal's number). The listeners stay on (`on`, not `once`) until
// removed: a library that loads signal-exit (node-llama-cpp's dependencies do, for `ins worker
// --backend gguf`) re-raises a signal it finds no other listener for, which killed the worker
// with 143 before it could deregister, once a `once` listener had removed itself.
import { constants } from 'node:os';

export type StopSignal = 'SIGTERM' | 'SIGINT';

/** Calls `stop` on the first SIGTERM or SIGINT; answers the function that removes the listeners. */
export function onStopSignals(stop: (signal: StopSignal) => void): () => void {
  let stopping = false;
  const listeners = (['SIGTERM', 'SIGINT'] as const).map((signal) => {
    const listener = () => {
      if (stopping) process.exit(128 + constants.signals[signal]);
      stopping = true;
      stop(signal);
    };
    process.on(signal, listener);
    return [signal, listener] as const;
  });
  return () => {
    for (const [signal, listener] of listeners) process.off(signal, listener);
  };
}
