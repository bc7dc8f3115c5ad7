/** The schedule form's pure rules: presets as cron and back, fire times in a zone, the body sent. */
import { describe, expect, it } from 'vitest';

import {
  DEFAULT_TIMING,
  formatFireTime,
  presetCron,
  timingFields,
  timingOf,
  wallTime
} from '../src/schedules/format';
import { parametersToSend } from '../src/pipeline/format';
import { opensRun, tooltip } from '../src/schedules/components/RunGrid';
import { newScheduleText, scheduleBody } from '../src/schedules/spec';

describe('presetCron', () => {
  it('writes each preset as the cron it stands for', () => {
    expect(presetCron({ ...DEFAULT_TIMING, preset: 'hourly' })).toBe(
      '0 * * * *'
    );
    expect(
      presetCron({ ...DEFAULT_TIMING, preset: 'daily', time: '09:30' })
    ).toBe('30 9 * * *');
    expect(
      presetCron({
        ...DEFAULT_TIMING,
        preset: 'weekly',
        time: '18:05',
        day: '5'
      })
    ).toBe('5 18 * * 5');
    expect(
      presetCron({ ...DEFAULT_TIMING, preset: 'cron', cron: ' 0 2 * * 1-5 ' })
    ).toBe('0 2 * * 1-5');
    expect(presetCron({ ...DEFAULT_TIMING, preset: 'interval' })).toBeNull();
  });

  it('leaves a time that is none for the server to refuse', () => {
    expect(
      presetCron({ ...DEFAULT_TIMING, preset: 'daily', time: '25:00' })
    ).toBe('25:00 * * *');
  });

  it('sends an interval as typed', () => {
    expect(
      timingFields({ ...DEFAULT_TIMING, preset: 'interval', interval: ' 90 ' })
    ).toEqual({ interval_seconds: '90' });
  });
});

describe('timingOf', () => {
  it('reads a saved cron back as its preset', () => {
    expect(timingOf('0 * * * *', null).preset).toBe('hourly');
    expect(timingOf('30 9 * * *', null)).toMatchObject({
      preset: 'daily',
      time: '09:30'
    });
    expect(timingOf('5 18 * * 5', null)).toMatchObject({
      preset: 'weekly',
      time: '18:05',
      day: '5'
    });
    expect(timingOf('0 2 * * 1-5', null)).toMatchObject({
      preset: 'cron',
      cron: '0 2 * * 1-5'
    });
    expect(timingOf(null, 3600)).toMatchObject({
      preset: 'interval',
      interval: '3600'
    });
  });

  it('round-trips through presetCron', () => {
    for (const cron of [
      '0 * * * *',
      '30 9 * * *',
      '0 0 * * 0',
      '*/5 * * * *'
    ]) {
      expect(presetCron(timingOf(cron, null))).toBe(cron);
    }
  });
});

describe('times in a zone', () => {
  it('writes an instant on the zone’s wall clock', () => {
    expect(wallTime('2026-11-29T08:30:00Z', 'Europe/Berlin')).toBe(
      '2026-11-29T09:30'
    );
    expect(wallTime('2026-07-01T08:30:00Z', 'Europe/Berlin')).toBe(
      '2026-07-01T10:30'
    );
    expect(wallTime(null, 'UTC')).toBe('');
  });

  it('formats a fire time with its weekday, seconds only when there are some', () => {
    expect(formatFireTime('2026-11-29T08:30:00Z', 'Europe/Berlin')).toBe(
      'Sun 2026-11-29 09:30'
    );
    expect(formatFireTime('2026-11-29T08:30:15Z', 'UTC')).toBe(
      'Sun 2026-11-29 08:30:15'
    );
  });
});

describe('scheduleBody', () => {
  const daily = { ...DEFAULT_TIMING, preset: 'daily' as const, time: '09:30' };

  it('leaves a new schedule’s empty fields to the server', () => {
    const text = { ...newScheduleText('Europe/Berlin'), name: ' nightly ' };
    expect(scheduleBody(text, daily, 'a.ipynb', {}, false)).toEqual({
      name: 'nightly',
      kind: 'notebook',
      path: 'a.ipynb',
      cron: '30 9 * * *',
      timezone: 'Europe/Berlin',
      paused: false
    });
  });

  it('clears what an edit emptied and sends every parameter', () => {
    const text = {
      ...newScheduleText('UTC'),
      retries: '2',
      depends_on: ''
    };
    const interval = {
      ...DEFAULT_TIMING,
      preset: 'interval' as const,
      interval: '90'
    };
    expect(scheduleBody(text, interval, 'a.ipynb', {}, true)).toEqual({
      path: 'a.ipynb',
      interval_seconds: 90,
      cron: null,
      timezone: 'UTC',
      start: null,
      end: null,
      retries: 2,
      depends_on: null,
      paused: false,
      parameters: {}
    });
  });
});

describe('parametersToSend', () => {
  const parameters = [
    { name: 'lr', default: 0.1, default_source: '0.1' },
    { name: 'tag', default: 'a', default_source: "'a'" }
  ];

  it('sends only what differs from the defaults, JSON for non-strings', () => {
    expect(
      parametersToSend(
        parameters,
        new Map([
          ['lr', '0.5'],
          ['tag', 'a']
        ])
      )
    ).toEqual({ lr: 0.5 });
  });

  it('names the parameter whose text is no JSON', () => {
    expect(() =>
      parametersToSend(parameters, new Map([['lr', 'fast']]))
    ).toThrow(/lr: "fast" is not a JSON value/);
  });
});

describe('the run grid', () => {
  const run = {
    logical_date: '2026-11-28T02:00:00Z',
    state: 'succeeded' as const,
    origin: 'schedule' as const,
    attempts: 1,
    run_id: 'fanout-20261128-020000-abc123',
    reason: null,
    created: '2026-11-28T02:00:00Z',
    started: '2026-11-28T02:00:00Z',
    finished: '2026-11-28T02:00:09Z',
    retry_at: null
  };

  it('opens the workbench’s pipeline runs, not the Workflows Argo started', () => {
    expect(opensRun(run)).toBe(true);
    expect(opensRun({ ...run, run_id: null })).toBe(false);
    const argo = {
      ...run,
      origin: 'cluster' as const,
      run_id: 'every-minute-1764295200'
    };
    expect(opensRun(argo)).toBe(false);
    expect(tooltip(argo, 'UTC')).toContain(
      'Argo Workflow every-minute-1764295200'
    );
    expect(tooltip(run, 'UTC')).toContain('run fanout-20261128-020000-abc123');
  });
});
