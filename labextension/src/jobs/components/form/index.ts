/** The building blocks of the jobs' launch forms. */
export * from './fields';
export * from './formText';
export * from './inputs';
export * from './LaunchForm';
export * from './placement';
export * from './ResourceFields';
export * from './values';
