/**
 * Reading and rewriting one cell's pipeline tags, for the panel's cell editor.
 *
 * This only edits the `tags` list the user would otherwise type in the cell's property
 * inspector, in the server's vocabulary (`GET /pipelines/config`: which tags give which
 * role, Kale's aliases included); what the tags mean (steps, data flow, errors) is
 * decided by the server, which the panel asks again after every edit.
 */

/**
 * The cell tags the server reads (`tags` of `GET /pipelines/config`). Each list names the
 * spelling to write first, then the aliases it also reads.
 */
export interface ITagVocabulary {
  /** Each shared role (parameters, metrics, imports, ...) and the tags that give it. */
  roles: Record<string, string[]>;
  /** Keys of `KEY:NAME`, which opens the step NAME. */
  step: string[];
  /** Keys of `KEY:NAME`, which orders a step after NAME. */
  after: string[];
  /** Keys of `KEY:VALUE` step options (`gpu:1`), which belong on a step's cells only. */
  options: string[];
}

/**
 * What a code cell is in the pipeline, as far as its own tags say: `continue` (no role
 * tag, or an empty `block:`: the same as the cell above), `step` (opens one, or names the
 * step it continues), or one of the shared roles.
 */
export type CellRole = string;

/** The roles a person picks from, with their labels, in the order offered. */
const ROLE_LABELS: ReadonlyArray<[CellRole, string]> = [
  ['continue', 'Same as cell above'],
  ['step', 'Starts step'],
  ['imports', 'Imports'],
  ['functions', 'Functions'],
  ['parameters', 'Parameters'],
  ['metrics', 'Metrics'],
  ['skip', 'Skip']
];

/** The roles to offer: the server's, labelled, in the order a person reads a notebook. */
export function roleChoices(
  vocabulary: ITagVocabulary
): { value: CellRole; label: string }[] {
  const known = ['continue', 'step', ...Object.keys(vocabulary.roles)];
  const labelled = ROLE_LABELS.filter(([role]) => known.includes(role));
  const others = known
    .filter(
      role => !ROLE_LABELS.some(([labelledRole]) => labelledRole === role)
    )
    .map((role): [CellRole, string] => [role, role]);
  return [...labelled, ...others].map(([value, label]) => ({ value, label }));
}

export interface ICellRole {
  role: CellRole;
  /** The step name for role `step` ('' otherwise). */
  step: string;
}

/** A tag split as the server splits it: its lower-case key, and the value after `:`. */
function splitTag(tag: string): { key: string; value: string | null } {
  const text = tag.trim();
  const colon = text.indexOf(':');
  return colon < 0
    ? { key: text.toLowerCase(), value: null }
    : {
        key: text.slice(0, colon).trim().toLowerCase(),
        value: text.slice(colon + 1).trim()
      };
}

/** The shared role a bare tag gives, if any. */
function roleOf(key: string, vocabulary: ITagVocabulary): CellRole | null {
  for (const [role, tags] of Object.entries(vocabulary.roles)) {
    if (tags.includes(key)) {
      return role;
    }
  }
  return null;
}

/**
 * The role the tags give a cell, as Kale (and the server) read them: a role tag decides
 * the cell wherever it stands among its tags (the first of two wins; `step:` and `after:`
 * beside it are ignored); else the first `step:NAME`; else the cell continues the one
 * above, as an untagged cell does, and an empty `block:` (what Kale's editor writes on a
 * step's later cells) says just that.
 */
export function readRole(
  tags: readonly string[],
  vocabulary: ITagVocabulary
): ICellRole {
  let step = '';
  for (const tag of tags) {
    const { key, value } = splitTag(tag);
    if (value === null) {
      const role = roleOf(key, vocabulary);
      if (role) {
        return { role, step: '' };
      }
    } else if (!step && value && vocabulary.step.includes(key)) {
      step = value;
    }
  }
  return step ? { role: 'step', step } : { role: 'continue', step: '' };
}

/**
 * The tags after giving the cell `role` (and `step` name): role and step tags are
 * replaced (an empty `block:` too: "same as above" needs no tag), other tags kept; step
 * options (`after:`, `gpu:`...) are dropped from a cell that becomes a shared one
 * (imports, parameters, ...), where they would be an error. A step without a name
 * writes no step tag: the cell continues the one above.
 */
export function withRole(
  tags: readonly string[],
  role: CellRole,
  step: string,
  vocabulary: ITagVocabulary
): string[] {
  const shared = role !== 'step' && role !== 'continue';
  const stepOnly = [...vocabulary.after, ...vocabulary.options];
  const kept = tags.filter(tag => {
    const { key, value } = splitTag(tag);
    if (value === null) {
      return roleOf(key, vocabulary) === null;
    }
    if (vocabulary.step.includes(key)) {
      return false;
    }
    return !(shared && stepOnly.includes(key));
  });
  if (role === 'step') {
    // No name is no step of its own: the cell continues the one above.
    return step.trim()
      ? [`${vocabulary.step[0]}:${step.trim()}`, ...kept]
      : kept;
  }
  const written = vocabulary.roles[role]?.[0];
  return written ? [written, ...kept] : kept;
}
