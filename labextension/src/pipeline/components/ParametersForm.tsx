/**
 * The pipeline's parameters (the `parameters` cell), each with its default filled in;
 * a 400 naming `parameters.NAME` is shown under that parameter.
 */
import * as React from 'react';

import { IFieldError, isInvalid, placed } from '../../common/fieldError';
import type { IParameter } from '../types';

export interface IParametersFormProps {
  parameters: readonly IParameter[];
  value: (parameter: IParameter) => string;
  /** The error of the last run start; it marks the parameter it names. */
  error: IFieldError | null;
  onChange: (name: string, text: string) => void;
}

export function ParametersForm(props: IParametersFormProps): JSX.Element {
  if (props.parameters.length === 0) {
    return (
      <div className="cube-Pipeline-empty">
        No parameters: tag a cell “Parameters” to add some.
      </div>
    );
  }
  const path = (parameter: IParameter) => `parameters.${parameter.name}`;
  const error = placed(props.parameters.map(path), props.error);
  return (
    <div className="cube-Parameters" data-testid="cube-parameters">
      {props.parameters.map(parameter => {
        const id = `cube-param-${parameter.name}`;
        const invalid = isInvalid(error, path(parameter));
        return (
          <React.Fragment key={parameter.name}>
            <label className="cube-Parameters-name" htmlFor={id}>
              {parameter.name}
            </label>
            <input
              id={id}
              className={`jp-mod-styled cube-Parameters-input${invalid ? ' cube-mod-invalid' : ''}`}
              data-testid="cube-parameter"
              data-name={parameter.name}
              type="text"
              spellCheck={false}
              aria-invalid={invalid}
              title={`Default: ${parameter.default_source}`}
              value={props.value(parameter)}
              onChange={event =>
                props.onChange(parameter.name, event.target.value)
              }
            />
          </React.Fragment>
        );
      })}
    </div>
  );
}
