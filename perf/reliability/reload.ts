export async function reloadScenario(..._a: unknown[]): Promise<void> { throw new Error('not yet'); }
