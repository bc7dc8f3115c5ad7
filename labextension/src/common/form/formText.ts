/**
 * The text typed in a launch form's inputs, kept as one record: each input is bound to
 * its key, and every edit tells the model (which clears the error shown, as it speaks
 * of what was sent before).
 */
import * as React from 'react';

/** What an input needs to show and change one key of the form's text. */
export interface IBound {
  value: string;
  onChange: (value: string) => void;
}

export interface IFormText<K extends string> {
  text: Readonly<Record<K, string>>;
  /** The value and change handler of the input for `key`. */
  bind: (key: K) => IBound;
  /** Set `key` without counting as an edit (e.g. clear the name after a launch). */
  set: (key: K, value: string) => void;
}

export function useFormText<K extends string>(
  initial: Record<K, string>,
  onEdit: () => void
): IFormText<K> {
  const [text, setText] = React.useState(initial);
  const set = (key: K, value: string) =>
    setText(current => ({ ...current, [key]: value }));
  const bind = (key: K): IBound => ({
    value: text[key],
    onChange: value => {
      set(key, value);
      onEdit();
    }
  });
  return { text, bind, set };
}
