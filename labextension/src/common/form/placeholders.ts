/**
 * Placeholders that read as hints, never as values already filled in: an example says
 * so (`e.g. mnist-ddp`); the style (base.css) sets them lighter and in italics.
 */

/** An example of what to type: `e.g. mnist-ddp`. */
export function example(value: string): string {
  return `e.g. ${value}`;
}
