/**
 * Replicas per role of a framework, as the training form and a tuning form's script
 * trial ask for them: one count per role of the framework picked, kept per framework
 * while the user switches, sent as the spec's `replicas` over the file's role settings.
 */
import * as React from 'react';

import type { IBound, IFieldSpec } from '../../../common/form';
import { numberOrText } from '../../../common/form';
import { replicasSpec, roleCounts, Spec } from '../../specText';
import type { IFramework, IFrameworkRole } from '../../types';

export interface IRoleCounts {
  /** The framework's roles, one field each (`{prefix}replicas.{role}.replicas`). */
  fields: IFieldSpec<string>[];
  bind: (key: string) => IBound;
  /** The spec's `replicas` as typed, over the roles `file` (its `replicas`) set. */
  spec: (file: unknown) => Spec;
}

/**
 * The counts of `framework`'s roles; a spec file's `replicas` (`file`) starts them, its
 * roles left out there left empty (so left out again), else each role's default.
 */
export function useRoleCounts(
  frameworks: readonly IFramework[],
  framework: string,
  prefix: string,
  file: unknown,
  onEdit: () => void
): IRoleCounts {
  const [counts, setCounts] = React.useState<Record<string, string>>(() => {
    if (file === undefined) {
      return {};
    }
    const written = roleCounts(file);
    const roles = frameworks.find(f => f.value === framework)?.roles ?? [];
    return Object.fromEntries(
      roles.map(role => [`${framework}.${role.key}`, written[role.key] ?? ''])
    );
  });
  const roles = frameworks.find(f => f.value === framework)?.roles ?? [];
  const count = (role: IFrameworkRole) =>
    counts[`${framework}.${role.key}`] ?? String(role.default);
  return {
    fields: roles.map(role => ({
      key: role.key,
      label: role.name,
      path: `${prefix}replicas.${role.key}.replicas`,
      min: 0
    })),
    bind: key => ({
      value: count(roles.find(role => role.key === key)!),
      onChange: value => {
        setCounts({ ...counts, [`${framework}.${key}`]: value });
        onEdit();
      }
    }),
    spec: written =>
      replicasSpec(
        Object.fromEntries(
          roles.map(role => [role.key, numberOrText(count(role))])
        ),
        written
      )
  };
}
