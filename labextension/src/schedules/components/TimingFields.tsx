/**
 * When a schedule fires: a preset (hourly, daily at, weekly on), a custom cron or an
 * interval, in a timezone. The cron a preset stands for is shown, read-only, where the
 * server's error about `cron` shows.
 */
import * as React from 'react';

import { IBound, SelectField, TextField } from '../../common/form';
import {
  ITimingText,
  Preset,
  PRESET_LABELS,
  presetCron,
  WEEKDAYS
} from '../format';
import { WhenField } from './WhenInput';

export interface ITimingFieldsProps {
  timing: ITimingText;
  onTiming: (timing: ITimingText) => void;
  timezone: IBound;
  timezones: readonly string[];
}

const PRESETS = (Object.keys(PRESET_LABELS) as Preset[]).map(value => ({
  value,
  label: PRESET_LABELS[value]
}));

export function TimingFields(props: ITimingFieldsProps): JSX.Element {
  const { timing } = props;
  const set = (changes: Partial<ITimingText>) =>
    props.onTiming({ ...timing, ...changes });
  const { preset } = timing;
  return (
    <fieldset className="cube-JobForm-group" data-testid="cube-schedule-timing">
      <legend>When</legend>
      <div className="cube-JobForm-row">
        <SelectField
          label="Repeat"
          path="preset"
          testid="cube-schedule-preset"
          options={PRESETS}
          value={preset}
          onChange={value => set({ preset: value as Preset })}
        />
        {preset === 'weekly' && (
          <SelectField
            label="Day"
            path="day"
            testid="cube-schedule-day"
            options={WEEKDAYS.map((day, i) => ({
              value: String(i),
              label: day
            }))}
            value={timing.day}
            onChange={day => set({ day })}
          />
        )}
        {(preset === 'daily' || preset === 'weekly') && (
          <WhenField
            label="At"
            path="at"
            type="time"
            value={timing.time}
            onChange={time => set({ time })}
          />
        )}
        {preset === 'interval' && (
          <TextField
            label="Seconds"
            path="interval_seconds"
            type="number"
            min={1}
            placeholder="e.g. 3600"
            value={timing.interval}
            onChange={interval => set({ interval })}
          />
        )}
      </div>
      {preset === 'cron' ? (
        <TextField
          label="Cron (minute hour day month weekday)"
          path="cron"
          placeholder="e.g. 30 2 * * 1-5"
          value={timing.cron}
          onChange={cron => set({ cron })}
        />
      ) : (
        preset !== 'interval' && <CronShown cron={presetCron(timing) ?? ''} />
      )}
      <SelectField
        label="Timezone"
        path="timezone"
        options={props.timezones}
        {...props.timezone}
      />
    </fieldset>
  );
}

/** The cron a preset stands for: read-only, where an error about `cron` shows. */
function CronShown(props: { cron: string }): JSX.Element {
  return (
    <TextField
      label="Cron"
      path="cron"
      value={props.cron}
      disabled
      onChange={() => undefined}
    />
  );
}
