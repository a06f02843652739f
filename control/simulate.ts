/** Placeholder until the simulator lands (issue 3). */
export async function simulateCommand(_args: string[]): Promise<number> {
  console.error('uvs simulate: not implemented yet');
  return 2;
}
