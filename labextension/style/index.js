import './base.css';
import './pipeline.css';
