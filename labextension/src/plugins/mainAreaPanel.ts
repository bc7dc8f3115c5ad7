/**
 * A panel that lives in the main area (GPU, Jobs): one widget at a time, created on
 * first use or after it was closed, tracked so it is restored with the layout.
 */
import type { ILayoutRestorer, JupyterFrontEnd } from '@jupyterlab/application';
import { MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import type { LabIcon } from '@jupyterlab/ui-components';
import type { DockLayout, Widget } from '@lumino/widgets';

export interface IMainAreaPanelOptions<T extends Widget> {
  /** The widget's id, also the tracker's namespace and the restorer's name. */
  id: string;
  label: string;
  caption: string;
  icon: LabIcon;
  /** Makes the panel's content (each time the panel is opened anew). */
  create: () => T;
}

export class MainAreaPanel<T extends Widget> {
  constructor(
    private readonly _app: JupyterFrontEnd,
    private readonly _options: IMainAreaPanelOptions<T>
  ) {
    this.tracker = new WidgetTracker<MainAreaWidget<T>>({
      namespace: _options.id
    });
  }

  readonly tracker: WidgetTracker<MainAreaWidget<T>>;

  /** Restore the panel with the layout, through the command that opens it. */
  restore(restorer: ILayoutRestorer | null, command: string): void {
    if (restorer) {
      void restorer.restore(this.tracker, {
        command,
        name: () => this._options.id
      });
    }
  }

  /**
   * Show the panel and make it current. With `mode`, it goes there (beside `ref`) unless
   * it is already in view; without, it stays where it is, or opens as a new tab.
   */
  show(mode?: DockLayout.InsertMode, ref?: string | null): MainAreaWidget<T> {
    const widget = this._widget();
    if (!widget.isAttached || (mode && !widget.isVisible)) {
      this._app.shell.add(
        widget,
        'main',
        mode ? { mode, ref: ref ?? null } : undefined
      );
    }
    this._app.shell.activateById(widget.id);
    return widget;
  }

  private _widget(): MainAreaWidget<T> {
    let widget = this.tracker.currentWidget;
    if (!widget || widget.isDisposed) {
      const { id, label, caption, icon, create } = this._options;
      widget = new MainAreaWidget({ content: create() });
      widget.id = id;
      widget.title.label = label;
      widget.title.icon = icon;
      widget.title.caption = caption;
      widget.title.closable = true;
      void this.tracker.add(widget);
    }
    return widget;
  }
}
