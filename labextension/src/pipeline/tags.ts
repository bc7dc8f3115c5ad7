/**
 * Reading and rewriting one cell's pipeline tags, for the panel's cell editor.
 *
 * This only edits the `tags` list the user would otherwise type in the cell's property
 * inspector; what the tags mean (steps, data flow, errors) is decided by the server,
 * which the panel asks again after every edit.
 */

/** What a code cell is in the pipeline, as far as its own tags say. */
export type CellRole =
  | 'continue'
  | 'step'
  | 'imports'
  | 'functions'
  | 'parameters'
  | 'metrics'
  | 'skip';

/** The roles a person picks from, with their labels. */
export const ROLE_LABELS: ReadonlyArray<[CellRole, string]> = [
  ['continue', 'Same as cell above'],
  ['step', 'Starts step'],
  ['imports', 'Imports'],
  ['functions', 'Functions'],
  ['parameters', 'Parameters'],
  ['metrics', 'Metrics'],
  ['skip', 'Skip']
];

/** Tags naming a role (Kale's aliases included), by role. */
const ROLE_TAGS: Record<Exclude<CellRole, 'continue' | 'step'>, string[]> = {
  imports: ['imports'],
  functions: ['functions'],
  parameters: ['parameters', 'pipeline-parameters'],
  metrics: ['metrics', 'pipeline-metrics'],
  skip: ['skip']
};
const STEP_PREFIXES = ['step:', 'block:'];
/** Tags that only make sense on a step's cells. */
const STEP_OPTION_PREFIXES = [
  'after:',
  'prev:',
  'image:',
  'cpu:',
  'memory:',
  'gpu:',
  'retries:',
  'timeout:'
];

export interface ICellRole {
  role: CellRole;
  /** The step name for role `step` ('' otherwise). */
  step: string;
}

/** The role the tags give a cell; the first role tag wins, as a person reads them. */
export function readRole(tags: readonly string[]): ICellRole {
  for (const tag of tags) {
    const prefix = STEP_PREFIXES.find(p => tag.startsWith(p));
    if (prefix) {
      return { role: 'step', step: tag.slice(prefix.length) };
    }
    for (const [role, names] of Object.entries(ROLE_TAGS)) {
      if (names.includes(tag)) {
        return { role: role as CellRole, step: '' };
      }
    }
  }
  return { role: 'continue', step: '' };
}

/**
 * The tags after giving the cell `role` (and `step` name): role tags are replaced,
 * other tags kept; step options (`after:`, `gpu:`...) are dropped from a cell that
 * becomes a shared one (imports, parameters, ...), where they would be an error.
 */
export function withRole(
  tags: readonly string[],
  role: CellRole,
  step = ''
): string[] {
  const roleNames = new Set(Object.values(ROLE_TAGS).flat());
  const kept = tags.filter(tag => {
    if (roleNames.has(tag) || STEP_PREFIXES.some(p => tag.startsWith(p))) {
      return false;
    }
    if (
      role !== 'step' &&
      role !== 'continue' &&
      STEP_OPTION_PREFIXES.some(p => tag.startsWith(p))
    ) {
      return false;
    }
    return true;
  });
  if (role === 'step') {
    return [`step:${step}`, ...kept];
  }
  if (role === 'continue') {
    return kept;
  }
  return [ROLE_TAGS[role][0], ...kept];
}
