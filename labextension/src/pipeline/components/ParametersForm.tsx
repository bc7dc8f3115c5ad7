/**
 * The pipeline's parameters (the `parameters` cell), each with its default filled in;
 * a 400 naming `parameters.NAME` is shown under that parameter.
 */
import * as React from 'react';

import type { IParameter } from '../types';

export interface IParametersFormProps {
  parameters: readonly IParameter[];
  value: (parameter: IParameter) => string;
  errorField: string | null;
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
  return (
    <div className="cube-Parameters" data-testid="cube-parameters">
      {props.parameters.map(parameter => {
        const id = `cube-param-${parameter.name}`;
        const invalid = props.errorField === `parameters.${parameter.name}`;
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
