/* DOM helpers: the page's elements by id, and SVG elements. */

const SVG_NS = "http://www.w3.org/2000/svg"; // a namespace name, not a URL the page loads

export const $ = (id) => document.getElementById(id);

export function svg(tag, attrs, parent) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (parent) parent.append(node);
  return node;
}

/** An SVG text at (x, y); title, when it differs from text (a clipped label), shows on hover. */
export function svgText(parent, x, y, text, attrs, title) {
  const node = svg("text", { x, y, ...attrs }, parent);
  node.textContent = text;
  if (title !== undefined && title !== text) svg("title", {}, node).textContent = title;
  return node;
}
