/** Asking before anything that stops or deletes what a user has. */
import { Dialog, showDialog } from '@jupyterlab/apputils';

/** Ask `title` with `body`; true when the user pressed the warning button `label`. */
export async function confirmAction(
  label: string,
  title: string,
  body: string
): Promise<boolean> {
  const result = await showDialog({
    title,
    body,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label })]
  });
  return result.button.accept;
}
