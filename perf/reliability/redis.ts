export async function redisScenario(..._a: unknown[]): Promise<void> { throw new Error('not yet'); }
