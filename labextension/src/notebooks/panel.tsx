/**
 * The "Notebook Servers" sidebar panel: a create form and the caller's servers.
 * It renders the model and turns clicks into model calls, asking for confirmation
 * before anything that stops or deletes a server.
 */
import * as React from 'react';

import { AllUsersToggle } from '../common/components/AllUsersToggle';
import { ErrorMessage } from '../common/components/ErrorMessage';
import {
  PanelHeader,
  RefreshButton,
  SectionTitle
} from '../common/components/PanelHeader';
import { confirmAction } from '../common/dialogs';
import { VisibleRenderer } from '../common/visibleRenderer';
import { CreateForm } from './components/CreateForm';
import { ServerRow } from './components/ServerRow';
import { serverIcon } from './icons';
import { NotebookServersModel, rowKey } from './model';
import type { IServer } from './types';

/** The sidebar widget. */
export class NotebookServersPanel extends VisibleRenderer<NotebookServersModel> {
  constructor(model: NotebookServersModel) {
    super(model, {
      id: 'cube-notebook-servers',
      className: 'cube-NotebookServersPanel',
      icon: serverIcon,
      caption: 'Notebook Servers',
      testid: 'cube-notebook-servers'
    });
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
        <PanelHeader title="Notebook Servers">
          <RefreshButton
            tooltip="Refresh the list"
            testid="cube-refresh"
            onClick={() => void this._refreshAll()}
          />
        </PanelHeader>
        <section className="cube-NotebookServers-section">
          <SectionTitle>New server</SectionTitle>
          <CreateForm
            profiles={model.profiles}
            profilesError={model.profilesError}
            creating={model.creation.busy}
            error={model.creation.error}
            focusRequest={this._focusRequest}
            onCreate={(name, profile) => model.create(name, profile)}
            onEdit={() => model.creation.clearError()}
          />
        </section>
        <section className="cube-NotebookServers-section">
          <SectionTitle note={user}>
            {model.allUsers ? 'All servers' : 'Your servers'}
          </SectionTitle>
          <AllUsersToggle
            scope={model}
            label="Show every user's servers"
            testid="cube-all-users"
          />
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
    if (
      await confirmAction(
        'Stop',
        `Stop ${server.name}?`,
        'Its kernels and terminals end; files in its workspace stay. You can start it again later.'
      )
    ) {
      await this.model.setStopped(server, true);
    }
  }

  private async _delete(server: IServer): Promise<void> {
    if (
      await confirmAction(
        'Delete',
        `Delete ${server.name}?`,
        'The server stops and leaves the list. Its workspace is kept: a new server ' +
          `named ${server.name} gets its files back.`
      )
    ) {
      await this.model.remove(server);
    }
  }

  private _focusRequest = 0;
}
