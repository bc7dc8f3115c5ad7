/**
 * The "Notebook Servers" sidebar panel: a create form and the caller's servers.
 * It renders the model and turns clicks into model calls, asking for confirmation
 * before anything that stops or deletes a server.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { refreshIcon, ToolbarButtonComponent } from '@jupyterlab/ui-components';
import * as React from 'react';

import { CreateForm } from './components/CreateForm';
import { ErrorMessage } from './components/ErrorMessage';
import { ServerRow } from './components/ServerRow';
import { serverIcon } from './icons';
import { NotebookServersModel, rowKey } from './model';
import type { IServer } from './types';
import { VisibleRenderer } from './visibleRenderer';

/** The sidebar widget. */
export class NotebookServersPanel extends VisibleRenderer<NotebookServersModel> {
  constructor(model: NotebookServersModel) {
    super(model);
    this.id = 'cube-notebook-servers';
    this.addClass('cube-NotebookServersPanel');
    this.title.icon = serverIcon;
    this.title.caption = 'Notebook Servers';
    this.node.setAttribute('data-testid', 'cube-notebook-servers');
  }

  /** Move the keyboard focus to the create form's name field. */
  focusCreateForm(): void {
    this._focusRequest += 1;
    this.update();
  }

  protected render(): JSX.Element {
    const model = this.model;
    const now = Date.now();
    const user = model.user;
    return (
      <div className="cube-NotebookServers">
        <header className="cube-NotebookServers-header">
          <h2 className="cube-NotebookServers-title">Notebook Servers</h2>
          <ToolbarButtonComponent
            icon={refreshIcon}
            tooltip="Refresh the list"
            dataset={{ testid: 'cube-refresh' }}
            onClick={() => void this._refreshAll()}
          />
        </header>
        <section className="cube-NotebookServers-section">
          <h3 className="cube-NotebookServers-subtitle">New server</h3>
          <CreateForm
            profiles={model.profiles}
            profilesError={model.profilesError}
            creating={model.creating}
            error={model.formError}
            errorField={model.formErrorField}
            focusRequest={this._focusRequest}
            onCreate={(name, profile) => model.create(name, profile)}
            onEdit={() => model.clearFormError()}
          />
        </section>
        <section className="cube-NotebookServers-section">
          <h3 className="cube-NotebookServers-subtitle">
            {model.allUsers ? 'All servers' : 'Your servers'}
            {user ? (
              <span className="cube-NotebookServers-user">{user}</span>
            ) : null}
          </h3>
          {model.isAdmin && (
            <label className="cube-NotebookServers-allUsers">
              <input
                type="checkbox"
                data-testid="cube-all-users"
                checked={model.allUsers}
                onChange={event => {
                  model.allUsers = event.target.checked;
                }}
              />
              Show every user&apos;s servers
            </label>
          )}
          <ErrorMessage message={model.listError} testid="cube-list-error" />
          {model.loaded && model.servers.length === 0 && (
            <div
              className="cube-NotebookServers-empty"
              data-testid="cube-empty"
            >
              No notebook servers yet. Create one above.
            </div>
          )}
          {!model.loaded && !model.listError && (
            <div className="cube-NotebookServers-empty">Loading…</div>
          )}
          <ul className="cube-ServerList" data-testid="cube-server-list">
            {model.servers.map(server => (
              <ServerRow
                key={rowKey(server)}
                server={server}
                showUser={user !== null && server.user !== user}
                busy={model.isBusy(server)}
                error={model.rowError(server)}
                now={now}
                onConnect={s => this._connect(s)}
                onStop={s => void this._stop(s)}
                onStart={s => void model.setStopped(s, false)}
                onDelete={s => void this._delete(s)}
              />
            ))}
          </ul>
        </section>
      </div>
    );
  }

  private async _refreshAll(): Promise<void> {
    await Promise.all([this.model.refresh(), this.model.loadProfiles()]);
  }

  private _connect(server: IServer): void {
    const url = this.model.client.connectUrl(server.url);
    // Open blank first and cut `opener`, so the server's page cannot script this one.
    const tab = window.open('', '_blank');
    if (tab) {
      tab.opener = null;
      tab.location.href = url;
    }
    this.model.setRowError(
      server,
      tab ? null : `The browser blocked the new tab; open ${url} yourself.`
    );
  }

  private async _stop(server: IServer): Promise<void> {
    const result = await showDialog({
      title: `Stop ${server.name}?`,
      body: 'Its kernels and terminals end; files in its workspace stay. You can start it again later.',
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Stop' })]
    });
    if (result.button.accept) {
      await this.model.setStopped(server, true);
    }
  }

  private async _delete(server: IServer): Promise<void> {
    const result = await showDialog({
      title: `Delete ${server.name}?`,
      body: 'The server is stopped and removed from the list; it cannot be started again.',
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
    });
    if (result.button.accept) {
      await this.model.remove(server);
    }
  }

  private _focusRequest = 0;
}
