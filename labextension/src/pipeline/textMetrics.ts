/**
 * The size of the text the DAG shows (JupyterLab's code font, through its CSS
 * variables), measured in the page, so the boxes fit their text whatever the user's
 * font settings.
 */
import { DEFAULT_METRICS, ITextMetrics } from './layout';

/** Lines of text this many times the font size apart. */
const LINE_SPACING = 1.3;

export function codeFontMetrics(): ITextMetrics {
  const style = getComputedStyle(document.body);
  const size = parseFloat(style.getPropertyValue('--jp-code-font-size'));
  const family = style.getPropertyValue('--jp-code-font-family').trim();
  const context = document.createElement('canvas').getContext('2d');
  if (!context || !size || !family) {
    return DEFAULT_METRICS;
  }
  // Bold, as the step names are: no narrower than the labels' regular weight.
  context.font = `600 ${size}px ${family}`;
  const sample = 'abcdefghijklmnopqrstuvwxyz_0123456789-';
  return {
    charWidth: context.measureText(sample).width / sample.length,
    lineHeight: Math.ceil(size * LINE_SPACING)
  };
}
