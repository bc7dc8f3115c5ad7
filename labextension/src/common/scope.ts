/**
 * A fetch made for one view (the admin's every-user view, or the caller's own) whose answer
 * may come back after the view changed. Kept free of Lumino so it is tested on its own.
 */

/**
 * `fetch` for the scope in force now; `null` if the scope changed before the answer came,
 * whether that answer is a result or an error (the old view's failure is not the new one's).
 */
export async function fetchForScope<S, T>(
  scope: () => S,
  fetch: (asked: S) => Promise<T>
): Promise<T | null> {
  const asked = scope();
  try {
    const answer = await fetch(asked);
    return asked === scope() ? answer : null;
  } catch (error) {
    if (asked !== scope()) {
      return null;
    }
    throw error;
  }
}
