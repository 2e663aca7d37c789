// A real TCP forwarder in front of PostgreSQL, for tests of what the server does while its
// database cannot be reached: shut, it drops every connection it carries and every new one (as a
// database restarting or a pooler gone would), counting the attempts; open, it forwards again.
import { createServer, connect, type Socket } from 'node:net';

export interface TcpGate {
  port: number;
  /** Connections dropped since the gate was shut. */
  refused: number;
  shut(): void;
  open(): void;
  close(): Promise<void>;
}

export async function startTcpGate(targetHost: string, targetPort: number): Promise<TcpGate> {
  const carried = new Set<Socket>();
  let shut = false;
  const gate: TcpGate = {
    port: 0,
    refused: 0,
    shut: () => {
      shut = true;
      gate.refused = 0;
      for (const s of carried) s.destroy();
    },
    open: () => {
      shut = false;
    },
    close: () =>
      new Promise((resolve) => {
        for (const s of carried) s.destroy();
        server.close(() => resolve());
      }),
  };
  const server = createServer((client) => {
    if (shut) {
      gate.refused++;
      client.destroy();
      return;
    }
    const upstream = connect(targetPort, targetHost);
    for (const s of [client, upstream]) {
      carried.add(s);
      s.on('close', () => carried.delete(s));
      s.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  gate.port = (server.address() as { port: number }).port;
  return gate;
}
