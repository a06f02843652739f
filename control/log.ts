/** pino, structured JSON on stdout; `pretty` prints one readable line per record instead. */
import pino, { type Logger } from 'pino';

export function makeLogger(level: string, pretty: boolean): Logger {
  if (!pretty) return pino({ level, base: { name: 'uvsd' } });
  const labels: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };
  const stream = {
    write(line: string) {
      try {
        const { level: lv, time, msg, name: _n, pid: _p, hostname: _h, ...rest } = JSON.parse(line) as Record<string, unknown>;
        const extra = Object.keys(rest).length ? ' ' + JSON.stringify(rest) : '';
        process.stdout.write(`${new Date(time as number).toISOString()} ${labels[lv as number] ?? lv} ${msg}${extra}\n`);
      } catch {
        process.stdout.write(line);
      }
    },
  };
  return pino({ level, base: { name: 'uvsd' } }, stream);
}
