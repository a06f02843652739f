export async function abuseScenario(..._a: unknown[]): Promise<void> { throw new Error('not yet'); }
