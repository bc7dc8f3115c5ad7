/** The building blocks of the workbench's forms. */
export * from './context';
export * from './fields';
export * from './formText';
export * from './inputs';
export * from './placeholders';
export * from './values';
