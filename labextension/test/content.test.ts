/** What the Pipeline panel sends of the notebook on screen: sources and tags, never outputs. */
import { describe, expect, it } from 'vitest';

import { withoutOutputs } from '../src/pipeline/client';

const NOTEBOOK = {
  nbformat: 4,
  nbformat_minor: 5,
  metadata: { kernelspec: { name: 'python3' } },
  cells: [
    { cell_type: 'markdown', metadata: {}, source: '# Title' },
    {
      cell_type: 'code',
      metadata: { tags: ['step:train'] },
      source: 'x = 1',
      execution_count: 7,
      outputs: [{ output_type: 'stream', name: 'stdout', text: 'big\n' }]
    }
  ]
};

describe('withoutOutputs', () => {
  it('keeps sources, tags and metadata and drops outputs and counts', () => {
    const sent = withoutOutputs(NOTEBOOK) as typeof NOTEBOOK;
    expect(sent.metadata).toEqual(NOTEBOOK.metadata);
    expect(sent.cells[0]).toEqual(NOTEBOOK.cells[0]);
    expect(sent.cells[1]).toEqual({
      ...NOTEBOOK.cells[1],
      outputs: [],
      execution_count: null
    });
    expect(NOTEBOOK.cells[1].outputs).toHaveLength(1); // the document itself is untouched
  });

  it('passes content it cannot read to the server, which names what is wrong', () => {
    expect(withoutOutputs('nope')).toBe('nope');
    expect(withoutOutputs({ cells: 3 })).toEqual({ cells: 3 });
  });
});
