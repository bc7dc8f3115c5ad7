/**
 * The create form, built from the admin's profiles. It sends what the user typed;
 * the server validates it and its error is shown right under the form (and marks the
 * input of the field it names).
 */
import { Button } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ErrorMessage } from '../../common/components/ErrorMessage';
import { IFieldError, placed } from '../../common/fieldError';
import {
  example,
  PlacedErrorContext,
  SelectInput,
  TextInput
} from '../../common/form';
import type { IProfile } from '../types';

/** The fields the form writes, as the server's errors name them. */
const PATHS = ['name', 'profile'];

export interface ICreateFormProps {
  profiles: readonly IProfile[];
  profilesError: string | null;
  creating: boolean;
  error: IFieldError | null;
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

  return (
    <form
      className="cube-CreateForm"
      data-testid="cube-create-form"
      onSubmit={event => void submit(event)}
    >
      <PlacedErrorContext.Provider value={placed(PATHS, props.error)}>
        <label className="cube-CreateForm-label" htmlFor="cube-create-name">
          Name
        </label>
        <TextInput
          id="cube-create-name"
          testid="cube-create-name"
          path="name"
          inputRef={nameInput}
          placeholder={example('my-notebook')}
          value={name}
          onChange={value => {
            setName(value);
            props.onEdit();
          }}
        />
        <label className="cube-CreateForm-label" htmlFor="cube-create-profile">
          Profile
        </label>
        <SelectInput
          id="cube-create-profile"
          testid="cube-create-profile"
          path="profile"
          value={profileName}
          disabled={props.profiles.length === 0}
          onChange={value => {
            setChosen(value);
            props.onEdit();
          }}
          options={props.profiles.map(p => ({
            value: p.name,
            label: p.display_name || p.name
          }))}
        />
      </PlacedErrorContext.Provider>
      {profile && <ProfileDetails profile={profile} />}
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
      <ErrorMessage
        message={props.error?.message}
        testid="cube-create-error"
        field={props.error?.field}
      />
    </form>
  );
}

/**
 * What the chosen profile gives: the admin's description, then what the backend really
 * applies of it (its image, memory, CPU and GPUs), in the server's words.
 */
function ProfileDetails(props: { profile: IProfile }): JSX.Element {
  const { profile } = props;
  return (
    <div className="cube-ProfileDetails" data-testid="cube-profile-details">
      {profile.description && (
        <div className="cube-ProfileDetails-description">
          {profile.description}
        </div>
      )}
      <ul
        className="cube-ProfileDetails-enforcement"
        data-testid="cube-profile-enforcement"
      >
        {(profile.enforcement ?? []).map(note => (
          <li key={note}>{note}</li>
        ))}
      </ul>
    </div>
  );
}
