/**
 * The resources asked per replica (CPU, memory, GPUs), as the training and serving
 * forms both ask for them: typed text, sent as the spec's `resources`.
 */
import * as React from 'react';

import { NumberField, TextField } from './fields';
import type { IBound } from './formText';
import { compact, numberOrText, textOrNothing } from './values';

/** The resources as typed. */
export interface IResourcesText {
  cpu: string;
  memory: string;
  gpu: string;
}

/** The resources a form starts with: none asked (the admin's defaults apply). */
export const NO_RESOURCES: IResourcesText = { cpu: '', memory: '', gpu: '' };

/** The spec paths the resource fields write. */
export const RESOURCE_PATHS = [
  'resources.cpu',
  'resources.memory',
  'resources.gpu'
];

/** The spec's `resources`: the keys left empty are left out. */
export function resourcesSpec(text: IResourcesText): Record<string, unknown> {
  return compact({
    cpu: textOrNothing(text.cpu),
    memory: textOrNothing(text.memory),
    gpu: numberOrText(text.gpu)
  });
}

export interface IResourceFieldsProps {
  bind: (key: keyof IResourcesText) => IBound;
  /** Examples shown in the empty CPU and memory inputs. */
  placeholders: { cpu: string; memory: string };
}

/** The CPU, memory and GPU fields (placed in the caller's row). */
export function ResourceFields(props: IResourceFieldsProps): JSX.Element {
  const { bind, placeholders } = props;
  return (
    <>
      <TextField
        label="CPU"
        path="resources.cpu"
        placeholder={placeholders.cpu}
        {...bind('cpu')}
      />
      <TextField
        label="Memory"
        path="resources.memory"
        placeholder={placeholders.memory}
        {...bind('memory')}
      />
      <NumberField
        label="GPUs"
        path="resources.gpu"
        min={0}
        placeholder="0"
        {...bind('gpu')}
      />
    </>
  );
}
