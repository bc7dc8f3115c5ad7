/**
 * A panel whose model only works (polls, fetches) while the panel is shown.
 */
import { LabIcon, VDomModel, VDomRenderer } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';

/** A model told when its panel (one of its views) is shown or hidden. */
export interface IVisibilityAware {
  setVisible(visible: boolean, view?: object): void;
}

/** How a panel presents itself. */
export interface IPanelOptions {
  /** The widget id (what the layout restorer and `activateById` use). */
  id?: string;
  /** The panel's CSS class. */
  className: string;
  /** `data-testid` of the panel's node. */
  testid: string;
  /** The tab's (or sidebar's) icon and tooltip. */
  icon?: LabIcon;
  caption?: string;
}

/**
 * Tells its model when it is shown, hidden, attached (the restored layout may show it)
 * or detached (a main-area panel closed while on screen).
 */
export abstract class VisibleRenderer<
  T extends VDomModel & IVisibilityAware
> extends VDomRenderer<T> {
  constructor(model: T, options: IPanelOptions) {
    super(model);
    if (options.id) {
      this.id = options.id;
    }
    this.addClass(options.className);
    if (options.icon) {
      this.title.icon = options.icon;
    }
    if (options.caption) {
      this.title.caption = options.caption;
    }
    this.node.setAttribute('data-testid', options.testid);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.model.setVisible(true, this);
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this.model.setVisible(false, this);
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this.model.setVisible(this.isVisible, this);
  }

  protected onBeforeDetach(msg: Message): void {
    this.model.setVisible(false, this);
    super.onBeforeDetach(msg);
  }
}
