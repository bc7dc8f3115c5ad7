/** The building blocks of the jobs' launch forms: the workbench's form fields and more. */
export * from '../../../common/form';
export * from './LaunchForm';
export * from './ResourceFields';
export * from './QueueFields';
export * from './RoleFields';
