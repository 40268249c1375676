/** Runs `tasks` in order with at most `inFlight` at once; rejects with the first failure. */
export async function runPool(tasks: ReadonlyArray<() => Promise<unknown>>, inFlight: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < tasks.length) await (tasks[next++] as () => Promise<unknown>)();
    }),
  );
}
