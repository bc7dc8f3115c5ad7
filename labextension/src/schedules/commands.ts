/** Command ids of the Schedules panel; part of the public surface (palette, shortcuts). */
export const ScheduleCommandIDs = {
  open: 'cube:open-schedules',
  /** The schedule form for a notebook: `{path}` (the active notebook's when left out). */
  create: 'cube:schedule-notebook',
  refresh: 'cube:refresh-schedules'
} as const;
