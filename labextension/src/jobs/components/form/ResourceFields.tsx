/**
 * The resources asked per replica (CPU, memory, GPUs), as the training and serving
 * forms both ask for them: typed text, sent as the spec's `resources`.
 */
import {
  compact,
  example,
  IFieldSpec,
  numberOrText,
  pathsOf,
  textOrNothing
} from '../../../common/form';

/** The resources as typed. */
export interface IResourcesText {
  cpu: string;
  memory: string;
  gpu: string;
}

/** The resources a form starts with: none asked (the admin's defaults apply). */
export const NO_RESOURCES: IResourcesText = { cpu: '', memory: '', gpu: '' };

/** The CPU, memory and GPU fields, with examples in the empty CPU and memory inputs (empty: the
 * admin's defaults). */
export function resourceFields(placeholders: {
  cpu: string;
  memory: string;
}): IFieldSpec<keyof IResourcesText>[] {
  return [
    {
      key: 'cpu',
      label: 'CPU',
      path: 'resources.cpu',
      placeholder: example(placeholders.cpu)
    },
    {
      key: 'memory',
      label: 'Memory',
      path: 'resources.memory',
      placeholder: example(placeholders.memory)
    },
    {
      key: 'gpu',
      label: 'GPUs',
      path: 'resources.gpu',
      min: 0,
      placeholder: 'none'
    }
  ];
}

/** The spec paths the resource fields write. */
export const RESOURCE_PATHS = pathsOf(resourceFields({ cpu: '', memory: '' }));

/** The spec's `resources`: the keys left empty are left out. */
export function resourcesSpec(text: IResourcesText): Record<string, unknown> {
  return compact({
    cpu: textOrNothing(text.cpu),
    memory: textOrNothing(text.memory),
    gpu: numberOrText(text.gpu)
  });
}
