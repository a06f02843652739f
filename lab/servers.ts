/**
 * The real-server program the lab runs in each real-server namespace:
 *   HTTP  GET /            → "<name>\n"
 *         GET /whoami      → {"name","client","server"} (client as the server saw it)
 *         GET /blob?bytes=N&seed=S → N deterministic bytes (blobStream), for integrity checks
 *         GET /hold?ms=N   → sends "<name>\n", holds the response open N ms, then ends it
 *   UDP   echo: answers "<name> <payload>"
 *   TCP   echo: every byte back, prefixed once with "<name>\n" on connect
 */
import { createServer } from 'node:http';
import { createServer as createTcpServer } from 'node:net';
import { createSocket } from 'node:dgram';
import { blobChunk } from './blob';

interface Opts {
  name: string;
  http: number;
  udp: number;
  echo: number;
}

function parse(argv: string[]): Opts {
  const o: Opts = { name: 'rs', http: 8080, udp: 5353, echo: 9007 };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i]!.replace(/^--/, '');
    const v = argv[i + 1]!;
    if (k === 'name') o.name = v;
    else if (k === 'http' || k === 'udp' || k === 'echo') o[k] = Number(v);
  }
  return o;
}

const o = parse(process.argv.slice(2));

// Every service listens on IPv4 and, separately (v6-only, so IPv4 clients keep their plain
// addresses in /whoami), on IPv6.
const http = (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse): void => {
  const url = new URL(req.url ?? '/', 'http://x');
  if (url.pathname === '/whoami') {
    res.setHeader('content-type', 'application/json');
    res.end(
      JSON.stringify({
        name: o.name,
        client: `${req.socket.remoteAddress}:${req.socket.remotePort}`,
        server: `${req.socket.localAddress}:${req.socket.localPort}`,
      }) + '\n',
    );
    return;
  }
  if (url.pathname === '/blob') {
    const total = Number(url.searchParams.get('bytes') ?? 0);
    const seed = Number(url.searchParams.get('seed') ?? 1);
    res.setHeader('content-type', 'application/octet-stream');
    res.setHeader('content-length', String(total));
    let sent = 0;
    const pump = (): void => {
      while (sent < total) {
        const chunk = blobChunk(seed, sent, Math.min(65536, total - sent));
        sent += chunk.length;
        if (!res.write(chunk)) {
          res.once('drain', pump);
          return;
        }
      }
      res.end();
    };
    pump();
    return;
  }
  if (url.pathname === '/hold') {
    const ms = Number(url.searchParams.get('ms') ?? 1000);
    res.write(`${o.name}\n`);
    setTimeout(() => res.end('done\n'), ms);
    return;
  }
  res.end(`${o.name}\n`);
};
createServer(http).listen(o.http, '0.0.0.0');
createServer(http).listen({ port: o.http, host: '::', ipv6Only: true });

for (const type of ['udp4', 'udp6'] as const) {
  const udp = createSocket({ type, ipv6Only: type === 'udp6' });
  udp.on('message', (msg, rinfo) => udp.send(Buffer.concat([Buffer.from(`${o.name} `), msg]), rinfo.port, rinfo.address));
  udp.bind(o.udp, type === 'udp4' ? '0.0.0.0' : '::');
}

const echo = (sock: import('node:net').Socket): void => {
  sock.write(`${o.name}\n`);
  sock.pipe(sock);
  sock.on('error', () => sock.destroy());
};
createTcpServer(echo).listen(o.echo, '0.0.0.0');
createTcpServer(echo).listen({ port: o.echo, host: '::', ipv6Only: true });

process.on('SIGTERM', () => process.exit(0));
