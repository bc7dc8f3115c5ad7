/**
 * Where the workbench's commands are offered besides menus: the command palette (under
 * one category) and a launcher card. Added only once the server is known to offer the
 * feature's API, so a spawned notebook server shows none of it.
 */
import type { ICommandPalette } from '@jupyterlab/apputils';
import type { ILauncher } from '@jupyterlab/launcher';

/** The command palette category of every workbench command. */
export const CATEGORY = 'Cube Workbench';

export interface ICatalogOptions {
  palette: ICommandPalette | null;
  /** The commands the palette lists. */
  commands: readonly string[];
  launcher?: ILauncher | null;
  /** The launcher card: its command (run with `isLauncher: true`) and rank. */
  card?: { command: string; rank: number };
}

/** List the commands in the palette and add the launcher card (when those are there). */
export function addToCatalog(options: ICatalogOptions): void {
  const { palette, launcher, card } = options;
  if (palette) {
    for (const command of options.commands) {
      palette.addItem({ command, category: CATEGORY });
    }
  }
  if (launcher && card) {
    launcher.add({
      command: card.command,
      category: 'Other',
      rank: card.rank,
      args: { isLauncher: true }
    });
  }
}
