/**
 * A sidebar panel whose model only works (polls, fetches) while the panel is shown.
 */
import { VDomModel, VDomRenderer } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';

/** A model told when its panel is shown or hidden. */
export interface IVisibilityAware {
  setVisible(visible: boolean): void;
}

/** Tells its model when it is shown, hidden or attached (the restored layout may show it). */
export abstract class VisibleRenderer<
  T extends VDomModel & IVisibilityAware
> extends VDomRenderer<T> {
  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.model.setVisible(true);
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this.model.setVisible(false);
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this.model.setVisible(this.isVisible);
  }
}
