/** The admin's every-user toggle: an answer fetched for the view the admin just left never
 * overwrites the view they switched to, whichever answer comes back first. */
import { describe, expect, it } from 'vitest';

import { fetchForScope } from '../src/common/scope';

/** A panel's list whose fetches the test answers by hand, in any order. */
class ScopedList {
  allUsers = false;
  shown: string | null = null;
  error: string | null = null;
  pending: {
    allUsers: boolean;
    answer: (rows: string) => void;
    fail: (why: Error) => void;
  }[] = [];

  async poll(): Promise<void> {
    try {
      const rows = await fetchForScope(
        () => this.allUsers,
        allUsers =>
          new Promise<string>((answer, fail) =>
            this.pending.push({ allUsers, answer, fail })
          )
      );
      if (rows !== null) {
        this.shown = rows;
        this.error = null;
      }
    } catch (error) {
      this.error = (error as Error).message;
    }
  }

  /** What the toggle does: change the view and fetch for it at once. */
  toggle(allUsers: boolean): Promise<void> {
    this.allUsers = allUsers;
    return this.poll();
  }
}

describe('fetchForScope', () => {
  it('drops the late answer for the view the admin left', async () => {
    const list = new ScopedList();
    const mine = list.poll();
    const everyone = list.toggle(true);
    expect(list.pending.map(p => p.allUsers)).toEqual([false, true]);
    list.pending[1].answer('everyone');
    await everyone;
    list.pending[0].answer('mine'); // the old view's answer, late
    await mine;
    expect(list.shown).toBe('everyone');
  });

  it('keeps an answer for the view in force', async () => {
    const list = new ScopedList();
    const first = list.poll();
    list.pending[0].answer('mine');
    await first;
    expect(list.shown).toBe('mine');
    const there = list.toggle(true);
    const back = list.toggle(false); // back before either answer: "mine" is in force again
    list.pending[2].answer('mine again');
    await back;
    list.pending[1].answer('everyone');
    await there;
    expect(list.shown).toBe('mine again');
  });

  it("drops the old view's late failure, keeps the view in force's", async () => {
    const list = new ScopedList();
    const mine = list.poll();
    const everyone = list.toggle(true);
    list.pending[1].answer('everyone');
    await everyone;
    list.pending[0].fail(new Error('your list failed'));
    await mine;
    expect([list.shown, list.error]).toEqual(['everyone', null]);
    const again = list.poll();
    list.pending[2].fail(new Error('the every-user list failed'));
    await again;
    expect(list.error).toBe('the every-user list failed');
  });
});
