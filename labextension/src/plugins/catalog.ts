/**
 * Where the workbench's commands are offered besides menus: the command palette (under
 * one category) and a launcher card. Added only once the server is known to offer the
 * feature (`GET /info`), so a server shows only what it serves.
 */
import type { ICommandPalette } from '@jupyterlab/apputils';
import type { ILauncher } from '@jupyterlab/launcher';
import type { IDisposable } from '@lumino/disposable';

import type { IProbe } from '../common/api';

/** The command palette category of every workbench command. */
export const CATEGORY = 'Cube Workbench';

export interface ICatalogOptions {
  palette?: ICommandPalette | null;
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

export interface IOfferOptions<T> extends ICatalogOptions {
  /** What the feature built before it knew (disposed when the server lacks its API). */
  parts: readonly IDisposable[];
  /** Called with the probe's answer, once the API is known to be there. */
  ready?: (value: T | null) => void;
}

/**
 * Once the feature's probe has answered: on a server with its API, `ready` and the
 * catalog entries; on one without it, dispose what was built.
 * Resolves to whether the feature is offered.
 */
export async function offerIfAvailable<T>(
  probed: Promise<IProbe<T>>,
  options: IOfferOptions<T>
): Promise<boolean> {
  const { available, value } = await probed;
  if (!available) {
    for (const part of options.parts) {
      part.dispose();
    }
    return false;
  }
  options.ready?.(value);
  addToCatalog(options);
  return true;
}
