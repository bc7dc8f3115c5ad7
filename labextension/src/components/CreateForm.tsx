/**
 * The create form, built from the admin's profiles. It sends what the user typed;
 * the server validates it and its error is shown right under the form.
 */
import { Button, HTMLSelect } from '@jupyterlab/ui-components';
import * as React from 'react';

import { resourceParts } from '../format';
import type { IProfile } from '../types';
import { ErrorMessage } from './ErrorMessage';

export interface ICreateFormProps {
  profiles: readonly IProfile[];
  profilesError: string | null;
  creating: boolean;
  error: string | null;
  errorField: string | null;
  /** Changes whenever the name field should take the focus. */
  focusRequest: number;
  onCreate: (name: string, profile: string) => Promise<boolean>;
  onEdit: () => void;
}

function defaultProfile(profiles: readonly IProfile[]): string {
  const preferred = profiles.find(p => p.default) ?? profiles[0];
  return preferred ? preferred.name : '';
}

export function CreateForm(props: ICreateFormProps): JSX.Element {
  const [name, setName] = React.useState('');
  const [chosen, setChosen] = React.useState('');
  const nameInput = React.useRef<HTMLInputElement>(null);
  const known = props.profiles.some(p => p.name === chosen);
  const profileName = known ? chosen : defaultProfile(props.profiles);
  const profile = props.profiles.find(p => p.name === profileName);

  React.useEffect(() => {
    if (props.focusRequest > 0) {
      nameInput.current?.focus();
    }
  }, [props.focusRequest]);

  const submit = async (event: React.FormEvent) => {
    event.preventDefault();
    if (await props.onCreate(name.trim(), profileName)) {
      setName('');
    }
  };

  const nameInvalid = !!props.error && props.errorField === 'name';
  const profileInvalid = !!props.error && props.errorField === 'profile';
  const details = profile ? resourceParts(profile) : [];

  return (
    <form
      className="cube-CreateForm"
      data-testid="cube-create-form"
      onSubmit={event => void submit(event)}
    >
      <label className="cube-CreateForm-label" htmlFor="cube-create-name">
        Name
      </label>
      <input
        id="cube-create-name"
        ref={nameInput}
        className={`jp-mod-styled cube-CreateForm-input${nameInvalid ? ' cube-mod-invalid' : ''}`}
        data-testid="cube-create-name"
        type="text"
        autoComplete="off"
        spellCheck={false}
        placeholder="my-notebook"
        aria-invalid={nameInvalid}
        value={name}
        onChange={event => {
          setName(event.target.value);
          props.onEdit();
        }}
      />
      <label className="cube-CreateForm-label" htmlFor="cube-create-profile">
        Profile
      </label>
      <HTMLSelect
        id="cube-create-profile"
        className={profileInvalid ? 'cube-mod-invalid' : undefined}
        data-testid="cube-create-profile"
        value={profileName}
        disabled={props.profiles.length === 0}
        onChange={event => {
          setChosen(event.target.value);
          props.onEdit();
        }}
        options={props.profiles.map(p => ({
          value: p.name,
          label: p.display_name || p.name
        }))}
      />
      {profile && (
        <div className="cube-ProfileDetails" data-testid="cube-profile-details">
          {profile.description && (
            <div className="cube-ProfileDetails-description">
              {profile.description}
            </div>
          )}
          <div className="cube-ProfileDetails-resources">
            {details.map(part => (
              <span key={part} className="cube-ServerRow-resource">
                {part}
              </span>
            ))}
          </div>
          {profile.image && (
            <div className="cube-ProfileDetails-image" title={profile.image}>
              {profile.image}
            </div>
          )}
        </div>
      )}
      <ErrorMessage
        message={props.profilesError}
        testid="cube-profiles-error"
      />
      <div className="cube-CreateForm-actions">
        <Button
          type="submit"
          className="cube-Button cube-mod-accept"
          data-testid="cube-create-submit"
          disabled={props.creating || props.profiles.length === 0}
        >
          {props.creating ? 'Creating…' : 'Create'}
        </Button>
      </div>
      <ErrorMessage message={props.error} testid="cube-create-error" />
    </form>
  );
}
